"""An island's trainable tensors as one flat vector, whatever its ZeRO stage.

DeepSpeed's own accessors (`deepspeed.utils.safe_get_full_grad` and friends) assemble a parameter's
full gradient from ZeRO 1-2 partitions; they are collectives inside the island, so every rank of the
island calls them, in the same order. Parameters are replicated on every rank at ZeRO 0-2, so the
leader reads them alone; writing them updates both the module's copy and ZeRO's fp32 master.
"""

from __future__ import annotations

import torch
from deepspeed.utils import safe_get_full_grad, safe_set_full_fp32_param, safe_set_full_grad


def trainable(engine) -> list[torch.nn.Parameter]:
    """The parameters the optimizer steps (a LoRA run: the adapter only), in a fixed order."""
    return [param for param in engine.module.parameters() if param.requires_grad]


def flatten(tensors: list[torch.Tensor]) -> torch.Tensor:
    """One float32 CPU vector: what crosses the bridge (gloo between islands)."""
    return torch.cat([tensor.detach().reshape(-1).float().cpu() for tensor in tensors])


def split(flat: torch.Tensor, like: list[torch.Tensor]) -> list[torch.Tensor]:
    """`flat` cut back into tensors shaped like `like`."""
    pieces, offset = [], 0
    for tensor in like:
        pieces.append(flat[offset : offset + tensor.numel()].view_as(tensor))
        offset += tensor.numel()
    return pieces


def full_grads(engine) -> torch.Tensor:
    """The island's reduced gradient, flat (a collective inside the island at ZeRO 1-2)."""
    grads = []
    for param in trainable(engine):
        grad = safe_get_full_grad(param)
        grads.append(torch.zeros_like(param) if grad is None else grad)
    return flatten(grads)


def set_full_grads(engine, flat: torch.Tensor) -> None:
    """Replace the island's reduced gradient before the optimizer steps."""
    params = trainable(engine)
    for param, grad in zip(params, split(flat, params), strict=True):
        safe_set_full_grad(param, grad.to(device=param.device, dtype=_grad_dtype(param)))


def params(engine) -> torch.Tensor:
    """The trainable parameters, flat (no collective: every rank holds them whole)."""
    return flatten(trainable(engine))


def set_params(engine, flat: torch.Tensor) -> None:
    """Make the trainable parameters `flat`: the module's copy and ZeRO's fp32 master alike."""
    targets = trainable(engine)
    with torch.no_grad():
        for param, value in zip(targets, split(flat, targets), strict=True):
            safe_set_full_fp32_param(param, value.to(param.device))  # a no-op without a ZeRO master
            param.data.copy_(value.to(device=param.device, dtype=param.dtype))


def _grad_dtype(param: torch.nn.Parameter) -> torch.dtype:
    return param.grad.dtype if param.grad is not None else torch.float32
