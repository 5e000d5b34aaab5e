"""The oracle for kernel.modelfiles.hfconfig's worked-out shapes: the model transformers builds on torch's meta device.

Every parameter gets its real shape and no memory, so counting the real classes is exact and cheap.
Only tests use it: the web tier sizes models without torch.
"""

from __future__ import annotations

from collections.abc import Mapping

from kernel.modelfiles.hfconfig import ModelShape, build_config


def meta_model(config: Mapping):
    """The model of this config on the meta device (raises what transformers and torch raise)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(build_config(config))


def meta_shapes(config: Mapping) -> tuple[dict[str, tuple[int, ...]], ModelShape]:
    """(the saved tensors' shapes without a tied lm_head, the ModelShape) of the built model."""
    import torch

    model = meta_model(config)
    tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items() if name not in tied}
    parameters = sum(p.numel() for p in model.parameters())  # parameters() yields a tied tensor once
    linears: dict[str, tuple[int, int, int]] = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and name != "lm_head":
            short = name.rsplit(".", 1)[-1]
            fan_in, fan_out, count = linears.get(short, (module.in_features, module.out_features, 0))
            linears[short] = (fan_in, fan_out, count + 1)
    return shapes, ModelShape(parameters, linears)
