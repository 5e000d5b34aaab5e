"""What a refused model upload is: `ModelFileError`, whose message names the problem and what to do about it.

Shared by the package's archives (unpacking), weights (safetensors headers), checks (the folder's checks)
and loaders (which files a folder keeps). A refusal is made with `ModelFileError.of(template, code=...,
**values)`: it keeps its English template and values beside the message, so the platform says it in the
reader's language (workers.services.models.model_file_message); values that are English words are `Words`.
No Django.
"""

from __future__ import annotations

import json
from pathlib import Path

from kernel.words import Words

GIB = 1024**3
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")
SAVE_SAFELY = "model.save_pretrained(dir, safe_serialization=True)"
PACK_IT = (
    "Pack the model folder (config.json, model.safetensors, tokenizer files) with "
    "`tar czf model.tar.gz -C DIR .`, or upload it with `starverse model upload DIR`."
)
# Folders and files that archivers add beside the content (macOS Finder's "Compress").
ARCHIVER_LITTER = ("__MACOSX", ".DS_Store")


class ModelFileError(ValueError):
    """An upload that can't be trained; the message says what is wrong and what to do.

    `code` names the kind of problem for programs: not_an_archive, unsafe_archive, pickle_weights,
    unsupported_model, weights_mismatch, missing_tokenizer, ...
    """

    def __init__(
        self, message: str, code: str = "invalid_model", template: str = "", values: dict | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.template, self.values = template, dict(values or {})

    @classmethod
    def of(cls, template: str, *, code: str = "invalid_model", **values) -> ModelFileError:
        """The refusal `template % values`, keeping both (an error made without a template stays English)."""
        return cls(template % values, code, template, values)


class ModelTooLarge(ModelFileError):
    """An upload over the size limit (the API answers 413)."""


def too_large(what: Words, limit: int) -> ModelTooLarge:
    """`what` says how large the upload is (an English phrase, translated as its own msgid)."""
    return ModelTooLarge.of(
        "%(what)s; the limit is %(limit)s bytes. Upload the model in safetensors without extra files.",
        code="model_too_large",
        what=what,
        limit=f"{limit:,}",
    )


def refuse_pickle(name: str) -> None:
    if name.lower().endswith(PICKLE_SUFFIXES):
        raise ModelFileError.of(
            "'%(name)s' is a pickle file, which can run code when loaded and is never opened here. "
            "Convert the weights to safetensors: " + SAVE_SAFELY + ", and upload without the pickle files.",
            code="pickle_weights",
            name=name,
        )


def read_json(path: Path, shown: str, code: str):
    """A JSON file of the upload, or a refusal naming it (5,000 nested brackets exhaust the decoder's stack)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise ModelFileError.of(
            "%(file)s is not valid JSON: %(error)s.", code=code, file=shown, error=str(error)
        ) from None
    except RecursionError:
        raise ModelFileError.of("%(file)s is nested too deeply to be a model's file.", code=code, file=shown) from None
