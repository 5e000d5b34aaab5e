"""The trained model in Hugging Face format, written into a checkpoint (every one: `checkpoint.save`).

    model/      config.json, generation_config.json, model.safetensors (or shards + index),
                tokenizer files: loads with AutoModelForCausalLM.from_pretrained(path)
    adapter/    LoRA jobs only: adapter_config.json, adapter_model.safetensors and the tokenizer:
                loads with peft's PeftModel.from_pretrained(base, path)

For LoRA, model/ holds the merged weights (W + alpha/r · B·A per adapted layer), so either form can
be downloaded; it is written only when `merged` (final and stop checkpoints): an intermediate LoRA
checkpoint holds its adapter alone. Weights are the fp32 master copies; nothing is pickled.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import torch

from hosts.runtime.hfmodel import ModelSource

MODEL_DIR, ADAPTER_DIR = "model", "adapter"
MAX_SHARD_SIZE = "5GB"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
)
_PEFT_PREFIX = "base_model.model."
_LORA_KEY = re.compile(r"^(?P<module>.+)\.lora_(?P<which>[AB])\.default\.weight$")


def export(
    directory: Path, module: torch.nn.Module, weights: dict[str, torch.Tensor], source: ModelSource, merged: bool = True
) -> None:
    """Write model/ (and adapter/ for LoRA) under `directory` from the full fp32 `weights` of `module`.

    A LoRA job's `weights` may hold only the adapter's when not `merged`: then adapter/ alone is written."""
    if source.is_lora:
        adapter = directory / ADAPTER_DIR
        module.save_pretrained(str(adapter), state_dict=weights, safe_serialization=True)
        _name_base_model(adapter, source.name)
        _copy_tokenizer(source, adapter)
        if not merged:
            return
        base = module.get_base_model()
        weights = merge_lora(weights, scaling=source.lora.alpha / source.lora.r)
    else:
        base = module
    out = directory / MODEL_DIR
    out.mkdir(parents=True, exist_ok=True)
    save_weights(out, weights)
    base.config.save_pretrained(str(out))
    _generation_config(base, source).save_pretrained(str(out))
    _copy_tokenizer(source, out)


def merge_lora(weights: dict[str, torch.Tensor], scaling: float) -> dict[str, torch.Tensor]:
    """A PeftModel's weights as the base model's, each adapted W replaced by W + scaling · B·A."""
    factors: dict[str, dict[str, torch.Tensor]] = {}
    merged: dict[str, torch.Tensor] = {}
    for name, tensor in weights.items():
        match = _LORA_KEY.match(name)
        if match:
            factors.setdefault(match["module"], {})[match["which"]] = tensor
        else:
            merged[name] = tensor
    for module, pair in factors.items():
        key = f"{module}.base_layer.weight"
        merged[key] = merged[key] + scaling * (pair["B"] @ pair["A"])
    return {_base_name(name): tensor for name, tensor in merged.items()}


def _base_name(name: str) -> str:
    return name.removeprefix(_PEFT_PREFIX).replace(".base_layer.", ".")


def save_weights(directory: Path, weights: dict[str, torch.Tensor], max_shard_size: str = MAX_SHARD_SIZE) -> None:
    """model.safetensors, or shards with model.safetensors.index.json when larger than one shard."""
    from huggingface_hub import split_torch_state_dict_into_shards
    from safetensors.torch import save_file

    weights = {name: tensor.contiguous() for name, tensor in weights.items()}
    split = split_torch_state_dict_into_shards(weights, max_shard_size=max_shard_size)
    for filename, names in split.filename_to_tensors.items():
        save_file({name: weights[name] for name in names}, str(directory / filename), metadata={"format": "pt"})
    if split.is_sharded:
        index = {"metadata": {**split.metadata}, "weight_map": split.tensor_to_filename}
        (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def _name_base_model(adapter: Path, name: str) -> None:
    """peft records the base model's folder on this host; name the model the job trained instead."""
    path = adapter / "adapter_config.json"
    config = json.loads(path.read_text())
    config["base_model_name_or_path"] = name
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _generation_config(model, source: ModelSource):
    from transformers import GenerationConfig

    if source.path and (Path(source.path) / "generation_config.json").is_file():
        return GenerationConfig.from_pretrained(source.path)
    return GenerationConfig.from_model_config(model.config)


def _copy_tokenizer(source: ModelSource, directory: Path) -> None:
    """The user's tokenizer files travel with the weights (catalog models have none: they read bytes)."""
    if not source.path:
        return
    for name in TOKENIZER_FILES:
        path = Path(source.path) / name
        if path.is_file():
            shutil.copyfile(path, directory / name)
