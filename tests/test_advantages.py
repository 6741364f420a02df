import math

import pytest
import torch

from trl_starpo.algorithms.advantages import group_relative_advantages, token_advantages
from trl_starpo.trajectory import Segment


def test_group_relative_advantages_by_hand():
    returns = torch.tensor([1.0, 0.0, 0.0, 0.0, 10.0, 10.0, 12.0, 8.0])
    advantages = group_relative_advantages(returns, group_size=4, eps=0.0)
    # group 1: mean 0.25, unbiased std sqrt(0.25) = 0.5; group 2: mean 10, std sqrt(8/3)
    std2 = math.sqrt(8 / 3)
    expected = [1.5, -0.5, -0.5, -0.5, 0.0, 0.0, 2 / std2, -2 / std2]
    assert advantages.tolist() == pytest.approx(expected)


def test_equal_returns_give_zero_advantage():
    advantages = group_relative_advantages(torch.tensor([-0.3, -0.3, 5.0, 5.0]), group_size=2)
    assert advantages.tolist() == [0.0, 0.0, 0.0, 0.0]


def test_unscaled_and_batch_scaled_advantages():
    returns = torch.tensor([1.0, 3.0, 0.0, 4.0])
    assert group_relative_advantages(returns, 2, scale="none").tolist() == [-1.0, 1.0, -2.0, 2.0]
    batch_std = returns.std().item()
    expected = [-1 / batch_std, 1 / batch_std, -2 / batch_std, 2 / batch_std]
    assert group_relative_advantages(returns, 2, scale="batch", eps=0.0).tolist() == pytest.approx(expected)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="multiple of 4"):
        group_relative_advantages(torch.zeros(6), group_size=4)
    with pytest.raises(ValueError, match="scale"):
        group_relative_advantages(torch.zeros(4), group_size=2, scale="max")


def test_token_advantages_weight_thinking_and_action_and_zero_the_rest():
    P, O, T, TH, A = (int(s) for s in Segment)
    segments = torch.tensor([[TH, TH, A, T, O, A], [A, A, O, O, T, T]])
    advantages = token_advantages(torch.tensor([2.0, -1.0]), segments, thinking_weight=0.5, action_weight=1.5)
    assert advantages.tolist() == [[1.0, 1.0, 3.0, 0.0, 0.0, 3.0], [-1.5, -1.5, 0.0, 0.0, 0.0, 0.0]]
