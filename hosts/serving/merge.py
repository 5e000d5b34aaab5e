"""Merge a LoRA adapter into its base with peft, for an engine that serves no adapters (`transformers serve`).

    python -m hosts.serving.merge --base BASE --adapter ADAPTER --out OUT

Runs as its own process (prepare.py starts it), so torch and peft stay out of the agent's. OUT gets the
merged weights (safetensors), the config and the tokenizer: the adapter's when it carries one (a job's
adapter/ does: hosts/runtime/export.py), else the base's.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def merge(base: Path, adapter: Path, out: Path) -> Path:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(base), dtype="auto")
    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    out.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(str(out))
    tokenizer_source = adapter if (adapter / "tokenizer_config.json").exists() else base
    AutoTokenizer.from_pretrained(str(tokenizer_source)).save_pretrained(str(out))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m hosts.serving.merge", description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True)
    parser.add_argument("--adapter", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    merge(args.base, args.adapter, args.out)


if __name__ == "__main__":
    main()
