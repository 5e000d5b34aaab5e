"""Tiny Hugging Face models and tokenizers built on the spot: nothing comes from a hub.

`make_model_dir(path, family)` writes what a user would upload: config.json, model.safetensors,
generation_config.json and a BPE tokenizer (trained with `tokenizers` on text made here) with a
chat template. Used by tests and benchmarks; imports torch and transformers lazily.
"""

from __future__ import annotations

import random
from pathlib import Path

SPECIAL = ["<unk>", "<s>", "</s>", "<pad>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
WORDS = [
    "the",
    "a",
    "chip",
    "runs",
    "trains",
    "model",
    "data",
    "fast",
    "slow",
    "price",
    "spot",
    "node",
    "host",
    "job",
    "step",
    "loss",
    "token",
    "batch",
    "rank",
    "memory",
    "cost",
    "hour",
    "yuan",
    "learn",
    "weight",
    "grad",
    "adam",
    "zero",
    "shard",
    "plan",
    "quote",
    "bid",
    "clear",
    "move",
    "resume",
]
FAMILIES = {
    "llama": dict(model_type="llama", architectures=["LlamaForCausalLM"]),
    "qwen2": dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"]),
    "mistral": dict(model_type="mistral", architectures=["MistralForCausalLM"]),
}


def sentences(count: int, seed: int = 0) -> list[str]:
    """Simple repetitive sentences a tiny model learns quickly."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        start = rng.randrange(len(WORDS) - 6)
        out.append(" ".join(WORDS[start : start + rng.randint(3, 6)]) + ".")
    return out


def chat_records(count: int, seed: int = 0) -> list[dict]:
    """Chat records whose answer is a function of the question: echo the words reversed."""
    rng = random.Random(seed)
    records = []
    for _ in range(count):
        words = rng.sample(WORDS, 3)
        records.append(
            {
                "messages": [
                    {"role": "user", "content": " ".join(words)},
                    {"role": "assistant", "content": " ".join(reversed(words))},
                ]
            }
        )
    return records


def make_tokenizer(directory: str | Path, vocab_size: int = 300, seed: int = 0):
    """A byte-level BPE tokenizer with a chat template, saved with save_pretrained; returns it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE(unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    corpus = sentences(400, seed) + [" ".join(WORDS)] * 5
    core.train_from_iterator(corpus, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(str(directory))
    return tokenizer


def tiny_config(family: str = "llama", vocab_size: int = 300, **overrides) -> dict:
    """A config.json mapping for a ~0.1M-parameter model of the family."""
    config = dict(
        FAMILIES[family],
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
    )
    config.update(overrides)
    return config


def make_model_dir(directory: str | Path, family: str = "llama", seed: int = 0, **overrides) -> Path:
    """A complete Hugging Face model directory (weights, config, tokenizer) of a tiny model."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = make_tokenizer(directory, seed=seed)
    config = tiny_config(family, vocab_size=len(tokenizer), **overrides)
    kind = config.pop("model_type")
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(kind, **config))
    model.save_pretrained(str(directory))
    return directory
