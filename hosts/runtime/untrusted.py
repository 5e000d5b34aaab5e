"""Checkpoints are untrusted input: nothing in one is ever unpickled beyond tensors and plain data.

A checkpoint is written by the ranks of whichever hosts a job was placed on, and hosts are third parties
(docs/RELIABILITY.md, 37): a pickle in one that names an arbitrary callable would run it in the next
rank that loads the file, on another host, with another user's data at hand. So every `torch.load` in a
rank is weights-only: ours say so, and DeepSpeed's own (which pass `weights_only=False`) are forced by
torch's TORCH_FORCE_WEIGHTS_ONLY_LOAD, which wins over the argument. The few plain types DeepSpeed keeps
in its checkpoints are allowed by name. Weights the user takes home are safetensors (`export.py`).
"""

from __future__ import annotations

import os

FORCE, FORCE_NOT = "TORCH_FORCE_WEIGHTS_ONLY_LOAD", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"


def load_weights_only() -> None:
    """From now on every torch.load in this process (and the processes it starts) is weights-only."""
    os.environ[FORCE] = "1"
    os.environ.pop(FORCE_NOT, None)  # torch refuses to load at all with both set
    import torch
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    # What DeepSpeed's ZeRO optimizer states hold besides tensors and containers: plain records and an enum.
    torch.serialization.add_safe_globals([LossScaler, DynamicLossScaler, ZeroStageEnum, fragment_address])
