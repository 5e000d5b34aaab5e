"""Checks of a user's Hugging Face model folder before anything of it is stored.

An upload is an archive (.tar.gz/.tgz, .tar or .zip) of a model folder: config.json of a supported
architecture, safetensors weights whose every tensor has the shape the config implies, and a
tokenizer. kernel.modelfiles.archives unpacks it safely; `check_model_dir` checks the folder, reading only
the safetensors headers (pickled weights are refused by name, never opened). Its order matters: the
config is read and bounded (hfconfig.check_sizes, and the caller's `admit`: what the fleet can train)
before anything is built from it, and the weights' headers before the config's layout is compared with
them. Every refusal is a `ModelFileError` whose message names the problem and what to do about it.

No Django: the platform's services call this, and so can a compute host. Shapes and parameter
counts come from kernel.modelfiles.hfconfig (laid out from the config, no torch); the tokenizer is loaded with
transformers' AutoTokenizer from local files only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kernel.modelfiles import hfconfig
from kernel.modelfiles.errors import ARCHIVER_LITTER, SAVE_SAFELY, ModelFileError, read_json, refuse_pickle
from kernel.modelfiles.weights import Tensor, read_weights
from kernel.modelspecs import spec_from_config
from kernel.words import Words

MAX_CONFIG_BYTES = 1024 * 1024
# config.json is kept in a PostgreSQL JSON column: no NUL, no lone surrogate, no deep nesting.
MAX_CONFIG_DEPTH = 32
SHOWN_PROBLEMS = 5


@dataclass(frozen=True)
class ModelFiles:
    """What the checks learnt of a valid model folder."""

    architecture: str
    parameters: int
    shape: dict
    config: dict
    size_bytes: int
    has_chat_template: bool
    max_position_embeddings: int | None
    weight_files: tuple[str, ...] = ()  # the safetensors files the tensors were read from


# -- the model folder ------------------------------------------------------------------------------


def check_model_dir(directory: Path, admit: Callable[[dict], None] | None = None) -> ModelFiles:
    """Check a model folder (unpacked upload or Hugging Face cache snapshot) and describe it.

    `admit(config)` may refuse the config (raising ModelFileError) before anything is built from it."""
    files = folder_files(directory)
    for name in files:
        refuse_pickle(name)
    config = read_config(directory, files)
    unsupported_as_error(hfconfig.check_sizes, config)
    architecture = unsupported_as_error(hfconfig.model_type, config)
    if admit is not None:
        admit(config)
    tensors = read_weights(directory, files)
    check_plausible_size(config, tensors)
    expected = unsupported_as_error(hfconfig.parameter_shapes, config)
    compare_weights(expected, tensors)
    shape = unsupported_as_error(hfconfig.model_shape, config)
    has_chat_template = check_tokenizer(directory, files, config)
    return ModelFiles(
        architecture=architecture,
        parameters=shape.parameters,
        shape=shape.as_dict(),
        config=config,
        size_bytes=sum(path.stat().st_size for path in files.values()),
        has_chat_template=has_chat_template,
        max_position_embeddings=config.get("max_position_embeddings"),
        weight_files=tuple(sorted({tensor.shard for tensor in tensors.values()})),
    )


def folder_files(directory: Path) -> dict[str, Path]:
    """Every file under the folder by its relative POSIX name (a cache snapshot's links are followed)."""
    return {
        path.relative_to(directory).as_posix(): path
        for path in sorted(directory.rglob("*"))
        if path.is_file() and path.name not in ARCHIVER_LITTER
    }


def unsupported_as_error(check, config: dict):
    try:
        return check(config)
    except hfconfig.UnsupportedModel as error:
        raise ModelFileError(str(error), "unsupported_model", error.template, error.values) from None


def read_config(directory: Path, files: dict[str, Path]) -> dict:
    if "config.json" not in files:
        found = ", ".join(list(files)[:6]) or Words("nothing")
        raise ModelFileError.of(
            "No config.json at the top of the model folder (found: %(found)s). Save the model with "
            + SAVE_SAFELY
            + ", which writes config.json beside the weights.",
            code="missing_config",
            found=found,
        )
    path = directory / "config.json"
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ModelFileError.of(
            "config.json is over %(limit)s bytes; a model's config is a few kilobytes.",
            code="invalid_config",
            limit=f"{MAX_CONFIG_BYTES:,}",
        )
    config = read_json(path, "config.json", "invalid_config")
    if not isinstance(config, dict):
        raise ModelFileError.of("config.json must hold a JSON object of the model's settings.", code="invalid_config")
    check_storable(config)
    return config


def check_storable(config: dict) -> None:
    """Refuse what PostgreSQL can't keep in the model's row: NUL characters, lone surrogates, deep nesting."""
    stack: list[tuple[int, object]] = [(1, config)]
    while stack:
        depth, node = stack.pop()
        if depth > MAX_CONFIG_DEPTH:
            raise ModelFileError.of(
                "config.json is nested deeper than %(depth)s levels.", code="invalid_config", depth=MAX_CONFIG_DEPTH
            )
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            for text in (key, value):
                if isinstance(text, str) and not storable(text):
                    raise ModelFileError.of(
                        "config.json holds a NUL character or a lone surrogate (%(text)s); a model's settings "
                        "are plain text.",
                        code="invalid_config",
                        text=repr(text[:40]),
                    )
            stack.append((depth + 1, value))


def storable(text: str) -> bool:
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_plausible_size(config: dict, tensors: dict[str, Tensor]) -> None:
    """Refuse a config far bigger than its weights before building it (a huge config takes long to build)."""
    try:
        estimate = spec_from_config("upload", config, 1).llama_parameters
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return  # malformed: hfconfig says what is wrong
    stored = sum(math.prod(tensor.shape) for tensor in tensors.values())
    if estimate > 2 * stored + 1_000_000:
        raise ModelFileError.of(
            "config.json describes a model of about %(estimate)s parameters, but the weights hold %(stored)s: "
            "they don't belong together. Save both with " + SAVE_SAFELY + ".",
            code="weights_mismatch",
            estimate=f"{estimate:,}",
            stored=f"{stored:,}",
        )


def compare_weights(expected: dict[str, tuple[int, ...]], tensors: dict[str, Tensor]) -> None:
    """Every tensor the config needs, with its shape, and nothing else (a tied lm_head may be saved or not)."""
    problems = []
    for name, shape in expected.items():
        tensor = tensors.get(name)
        if tensor is None:
            problems.append(
                Words.of("%(name)s is missing (config.json implies %(shape)s)", name=name, shape=list(shape))
            )
        elif tensor.shape != shape:
            problems.append(
                Words.of(
                    "%(name)s has shape %(found)s; config.json implies %(shape)s",
                    name=name,
                    found=list(tensor.shape),
                    shape=list(shape),
                )
            )
    embeddings = expected.get("model.embed_tokens.weight")
    for name in tensors.keys() - expected.keys():
        if name == "lm_head.weight" and tensors[name].shape == embeddings:
            continue  # tied to the embeddings; saved anyway
        problems.append(Words.of("%(name)s is not a weight of this config's model", name=name))
    if problems:
        more = len(problems) - SHOWN_PROBLEMS
        raise ModelFileError.of(
            "The weights don't match config.json: %(problems)s%(more)s. "
            "Upload the config.json the weights were saved with (" + SAVE_SAFELY + ").",
            code="weights_mismatch",
            problems=Words.joined(problems[:SHOWN_PROBLEMS]),
            more=Words.of("; and %(count)s more", count=more) if more > 0 else "",
        )


def check_tokenizer(directory: Path, files: dict[str, Path], config: dict) -> bool:
    """The tokenizer loads from the folder alone and fits the embeddings; returns whether it has a chat template."""
    vocabulary = {"tokenizer.model", "vocab.json", "vocab.txt", "spiece.model"} & files.keys()
    if "tokenizer.json" not in files and not (vocabulary and "tokenizer_config.json" in files):
        raise ModelFileError.of(
            "No tokenizer: add tokenizer.json (or tokenizer.model / vocab files with tokenizer_config.json), "
            "e.g. with tokenizer.save_pretrained(dir) into the model folder.",
            code="missing_tokenizer",
        )
    tokenizers = hfconfig.import_transformers().AutoTokenizer
    try:
        tokenizer = tokenizers.from_pretrained(str(directory), local_files_only=True, trust_remote_code=False)
    except Exception as error:  # a third-party loader failing on user files, in any way, is a refusal
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ModelFileError.of(
            "The tokenizer can't be loaded (%(reason)s). Save it with tokenizer.save_pretrained(dir).",
            code="invalid_tokenizer",
            reason=reason[:300],
        ) from None
    vocab_size = config.get("vocab_size")
    if isinstance(vocab_size, int) and len(tokenizer) > vocab_size:
        raise ModelFileError.of(
            "The tokenizer has %(tokens)s tokens but config.json's vocab_size is %(vocab_size)s: "
            "token ids past the embeddings can't be trained. Resize the embeddings "
            "(model.resize_token_embeddings(len(tokenizer))) and save again.",
            code="invalid_tokenizer",
            tokens=f"{len(tokenizer):,}",
            vocab_size=f"{vocab_size:,}",
        )
    return bool(getattr(tokenizer, "chat_template", None))
