"""What a job can train, as planning and launches see it: a model's source, and why one can't be had.

Shared by the model references' resolvers (workers/services/models.py for the catalog, uploads and the Hub,
workers/services/job_models.py for a finished job's model), which import this and not each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernel.modelfiles.hfconfig import ModelShape

# Sequence length of a job on a user's model unless it asks for another: the model's context, at most this.
DEFAULT_SEQ_LEN = 2048


class ModelUnavailable(ValueError):
    """A model name this platform can't train; the message says which names would do."""


@dataclass(frozen=True)
class ModelSource:
    """A model a job can train: its config, its stored files (None: built from the config), its shape."""

    name: str
    reference: str
    config: dict
    store_prefix: str | None  # its files' tree in object storage: models/<owner>/<uuid>, hub/<org>--<name>/<commit>
    shape: ModelShape
    seq_len: int
    source: str  # "catalog", "upload", "hub" or "job"
    description: str
    has_chat_template: bool = False  # the catalog's models have no tokenizer (bytes are their tokens)
    snapshot: Path | None = None  # a Hub model's folder in this platform's Hugging Face cache
    store_folder: str = ""  # the model's folder inside that tree ("model" of a job's checkpoint); "": the tree

    @property
    def location(self) -> str | None:
        """How a launch names its files: store:<prefix> (hosts/runtime/staging.py), or None."""
        return f"store:{self.store_prefix}" if self.store_prefix else None


def default_seq_len(config: dict) -> int:
    context = config.get("max_position_embeddings")
    return min(context, DEFAULT_SEQ_LEN) if isinstance(context, int) and context > 0 else DEFAULT_SEQ_LEN
