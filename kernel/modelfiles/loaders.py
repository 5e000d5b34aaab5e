"""The files a loader reads from a Hugging Face model folder, and how large each may be.

An upload keeps only these: config.json and generation_config.json, the safetensors weights (one file,
or shards and their index), and the tokenizer's files. A 2 MiB zip once stored a 2 GiB padding file
beside a valid model; now an archive member no loader reads is refused by name before a byte of it is
written (`admit_member`), a loader's file over its own bound too, and once the folder is checked every
file must be one the checks read (`refuse_unneeded_files`: no stray safetensors, nothing in subfolders).
Model cards and licences (README.md, LICENSE...) are skipped, not kept, when small: Hugging Face
folders and this platform's own exports carry them.

No Django: kernel.modelfiles.archives calls `admit_member` while unpacking, the platform's services the rest.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from kernel.modelfiles.checks import ModelFiles
from kernel.modelfiles.errors import ARCHIVER_LITTER, ModelFileError
from kernel.words import Words

MIB = 1024 * 1024
# Each file a loader reads, by name, with the most bytes it may hold: a config is a few kilobytes; the
# largest tokenizers (256k-token vocabularies) are tens of megabytes.
LOADER_FILES = {
    "config.json": MIB,
    "generation_config.json": MIB,
    "model.safetensors.index.json": 16 * MIB,
    "tokenizer.json": 64 * MIB,
    "tokenizer_config.json": 16 * MIB,
    "special_tokens_map.json": MIB,
    "added_tokens.json": 16 * MIB,
    "tokenizer.model": 64 * MIB,
    "spiece.model": 64 * MIB,
    "vocab.json": 64 * MIB,
    "vocab.txt": 64 * MIB,
    "merges.txt": 64 * MIB,
    "chat_template.jinja": MIB,
    "chat_template.json": MIB,
}
TEMPLATES_FOLDER = "additional_chat_templates"  # named templates: <name>.jinja, read by the tokenizer
WEIGHTS_SUFFIX = ".safetensors"  # model.safetensors, or the shards the index names (bounded by the archive's limit)
# Kept by Hugging Face folders and this platform's exports, read by no loader: skipped, never stored.
DOCUMENTS = {
    "readme.md",
    "license",
    "license.txt",
    "license.md",
    "notice",
    "notice.txt",
    "use_policy.md",
    ".gitattributes",
}
MAX_DOCUMENT_BYTES = MIB
ACCEPTED = Words(
    "config.json, generation_config.json, safetensors weights (model.safetensors, or model.safetensors.index.json "
    "and its shards) and the tokenizer's files (tokenizer.json, tokenizer_config.json, special_tokens_map.json, "
    "tokenizer.model, vocab.json, merges.txt, chat_template.jinja, ...)"
)
IN_A_SUBFOLDER = Words("is in a subfolder; a model folder keeps its files at its top")


def admit_member(relative: PurePosixPath, size: int) -> bool:
    """Whether to unpack an archive member (False: skip a small model card); refuses, by name, a file no loader
    reads, one in a subfolder no loader reads, and a loader's file over its bound."""
    name, folders = relative.name, relative.parts[:-1]
    if folders and folders[-1] == TEMPLATES_FOLDER and len(folders) <= 2 and name.endswith(".jinja"):
        return _check_size(relative, size, MIB)
    if len(folders) > 1:  # the model folder itself, or the archive's one top-level folder around it
        raise unneeded(relative, IN_A_SUBFOLDER)
    if name.lower() in DOCUMENTS:
        _check_size(relative, size, MAX_DOCUMENT_BYTES)
        return False  # read by nobody: not unpacked
    if name in LOADER_FILES:
        return _check_size(relative, size, LOADER_FILES[name])
    if name.endswith(WEIGHTS_SUFFIX):
        return True
    raise unneeded(relative, Words("is not a file any loader reads"))


def _check_size(relative: PurePosixPath, size: int, limit: int) -> bool:
    """True, or a refusal of a file over its kind's bound (declared in the archive, before it is read)."""
    if size > limit:
        raise ModelFileError.of(
            "'%(file)s' is %(size)s bytes; such a file is at most %(limit)s bytes. Leave it out and pack again.",
            code="unneeded_file",
            file=str(relative),
            size=f"{size:,}",
            limit=f"{limit:,}",
        )
    return True


def unneeded(relative: PurePosixPath | str, why: Words) -> ModelFileError:
    """`why` follows the file's name: an English phrase, translated as its own msgid."""
    return ModelFileError.of(
        "'%(file)s' %(why)s; an upload holds only %(accepted)s. Leave it out and pack again.",
        code="unneeded_file",
        file=str(relative),
        why=why,
        accepted=ACCEPTED,
    )


def refuse_unneeded_files(folder: Path, checked: ModelFiles) -> None:
    """After the checks: every file is one they read or a loader's small file; no stray weights anywhere."""
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.name in ARCHIVER_LITTER:
            continue
        relative = PurePosixPath(path.relative_to(folder).as_posix())
        if relative.name.endswith(WEIGHTS_SUFFIX) and str(relative) not in checked.weight_files:
            raise unneeded(relative, Words("holds weights that config.json and the index don't use"))
        if len(relative.parts) > 1 and relative.parts[0] != TEMPLATES_FOLDER:
            raise unneeded(relative, IN_A_SUBFOLDER)
