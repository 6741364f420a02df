"""Log-probs are scored at the model's own tokens only, with the numbers TRL's full scoring gives there."""

from contextlib import nullcontext

import pytest
import torch
import trl.trainer.utils as trl_utils
from conftest import CounterEnv
from test_trainer import BAD, GOOD, counter_tasks, make_args, scripted

from trl_starpo import StarPOTrainer


def projected_rows(monkeypatch):
    """Record how many positions each call of TRL's chunked LM-head kernel projects."""
    counts = []
    kernel = trl_utils._ChunkedLogProbFunction

    class Counting(kernel):
        @staticmethod
        def forward(ctx, hidden, *args):
            counts.append(hidden.size(0))
            return kernel.forward(ctx, hidden, *args)

    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", Counting)
    return counts


@pytest.mark.parametrize("beta", [0.0, 0.1])
def test_the_lm_head_scores_model_tokens_only_and_the_loss_is_unchanged(tmp_path, tiny_model_dir, monkeypatch, beta):
    trainer = StarPOTrainer(tiny_model_dir, environment=CounterEnv, args=make_args(tmp_path, beta=beta),
                            train_dataset=counter_tasks(1))
    scripted(trainer, {0: [GOOD, GOOD], 1: [BAD, BAD, BAD], 2: [GOOD, GOOD], 3: [BAD, GOOD, BAD]})
    counts = projected_rows(monkeypatch)
    inputs = trainer._generate_and_score_completions([dict(trainer.train_dataset[0])] * 4)
    model_tokens = inputs["completion_mask"] * inputs["tool_mask"]
    completion_tokens = int(inputs["completion_mask"].sum())
    assert int(model_tokens.sum()) < completion_tokens / 2  # the observations dominate the completion
    if beta:  # the reference log-probs are scored at the model tokens only
        assert counts == [int(model_tokens.sum())]

    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    counts.clear()
    scored_loss = trainer.compute_loss(trainer.model, inputs)
    assert counts == [int(model_tokens.sum())]
    scored_loss.backward()
    scored_grads = [p.grad.clone() for p in trainer.model.parameters() if p.grad is not None]
    trainer.model.zero_grad()

    # TRL's own path projects every completion position through the head: the same loss and gradient.
    monkeypatch.setattr(type(trainer), "_scoring", lambda self, positions: nullcontext())
    counts.clear()
    full_loss = trainer.compute_loss(trainer.model, inputs)
    assert counts == [inputs["completion_ids"].size(0) * (inputs["prompt_ids"].size(1) + inputs["completion_ids"].size(1) - 1)]
    full_loss.backward()
    full_grads = [p.grad for p in trainer.model.parameters() if p.grad is not None]
    assert scored_loss.item() == pytest.approx(full_loss.item(), abs=1e-6)
    assert len(scored_grads) == len(full_grads) > 0
    for scored, full in zip(scored_grads, full_grads):
        torch.testing.assert_close(scored, full, rtol=1e-4, atol=1e-6)


def test_scored_logps_match_the_full_distribution_at_model_tokens(tmp_path, tiny_model_dir):
    trainer = StarPOTrainer(tiny_model_dir, environment=CounterEnv, args=make_args(tmp_path), train_dataset=counter_tasks(1))
    scripted(trainer, {0: [GOOD, GOOD], 1: [BAD, BAD, BAD], 2: [GOOD, GOOD], 3: [BAD, GOOD, BAD]})
    batch = trainer._generate_and_score_completions([dict(trainer.train_dataset[0])] * 4)
    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    width = batch["completion_ids"].size(1)
    mask = (batch["completion_mask"] * batch["tool_mask"]).bool()
    with torch.no_grad():
        full, full_entropy, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, input_ids, attention_mask, width, batch_size=2, compute_entropy=True)
        with trainer._scoring(mask.long()):
            scored, scored_entropy, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model, input_ids, attention_mask, width, batch_size=2, compute_entropy=True)
        # and by hand, from the model's own logits
        logits = trainer.model(input_ids=input_ids, attention_mask=attention_mask).logits[:, -width - 1 : -1]
        by_hand = torch.log_softmax(logits.float() / trainer.temperature, dim=-1).gather(
            -1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(scored[mask], full[mask], rtol=0, atol=1e-5)
    torch.testing.assert_close(scored[mask], by_hand[mask], rtol=0, atol=1e-4)
    torch.testing.assert_close(scored_entropy[mask], full_entropy[mask], rtol=0, atol=1e-5)
    assert torch.all(scored[~mask] == 0) and torch.all(scored_entropy[~mask] == 0)
