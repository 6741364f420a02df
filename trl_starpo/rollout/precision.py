"""Frozen weights held in autocast's dtype while a model generates.

Under ``torch.autocast`` every linear layer casts its float32 weight to the autocast dtype on each call. Autocast
caches that cast only for weights that require grad, so a LoRA model's frozen base weights, nearly all of its
parameters, are cast again at every decoded token: on a CPU that copy costs more than the matmul it feeds. Casting
them once for a whole rollout gives the same products, since autocast computes in that dtype either way.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn


@contextmanager
def frozen_weights_in_autocast_dtype(model: nn.Module) -> Iterator[None]:
    """While inside, every frozen float32 weight and bias of ``model``'s linear layers is a copy in the dtype of the
    autocast active on the model's device; on exit the original parameters are put back, untouched.

    Nothing changes without an active autocast, for trainable parameters (autocast caches their casts), for weights
    not in float32 (quantized ones), or under a LoRA variant such as DoRA, which reads its base weight in float32.
    Only for use under ``torch.no_grad()``: the copies take no gradient.
    """
    device_type = next(model.parameters()).device.type
    if not torch.is_autocast_enabled(device_type):
        yield
        return
    dtype = torch.get_autocast_dtype(device_type)
    read_in_float32 = {id(module.base_layer) for module in model.modules() if _lora_variant(module)}
    copies: dict[int, nn.Parameter] = {}  # a parameter shared by several layers gets one copy
    swapped: list[tuple[nn.Module, str, nn.Parameter]] = []
    try:
        for module in model.modules():
            if not isinstance(module, nn.Linear) or id(module) in read_in_float32:
                continue
            for name in ("weight", "bias"):
                parameter = module._parameters.get(name)
                if parameter is not None and parameter.dtype == torch.float32 and not parameter.requires_grad:
                    if id(parameter) not in copies:
                        copies[id(parameter)] = nn.Parameter(parameter.detach().to(dtype), requires_grad=False)
                    setattr(module, name, copies[id(parameter)])
                    swapped.append((module, name, parameter))
        yield
    finally:
        for module, name, parameter in reversed(swapped):
            setattr(module, name, parameter)


def _lora_variant(module: nn.Module) -> bool:
    """Whether ``module`` is a peft LoRA layer whose adapter is a variant (DoRA and the like) rather than plain LoRA."""
    return hasattr(module, "base_layer") and bool(
        getattr(module, "lora_magnitude_vector", None) or getattr(module, "lora_variant", None)
    )
