"""What a job leaves behind: the final model and its checkpoints, listed and served safely."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from workers.models import Job
from workers.services.placement import checkpoint_dir

TAKE_HOME = {"model", "adapter"}  # the Hugging Face folders an exported checkpoint holds


@dataclass(frozen=True)
class Artifact:
    path: str
    size_bytes: int
    kind: str


def list_artifacts(job: Job) -> list[Artifact]:
    root = checkpoint_dir(job)
    if not root.is_dir():
        return []
    files = sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )
    final = Path(job.latest_checkpoint).name if job.latest_checkpoint else f"step-{job.max_steps}"
    return [Artifact(str(p.relative_to(root)), p.stat().st_size, _kind(p.relative_to(root), final)) for p in files]


def artifact_file(job: Job, relative: str) -> Path | None:
    """The file under the job's checkpoint folder, or None (never a path outside it)."""
    if "\x00" in relative:  # no file name holds one; Path would raise ValueError
        return None
    root = checkpoint_dir(job).resolve()
    try:
        candidate = (root / relative).resolve()
        found = root in candidate.parents and candidate.is_file()
    except OSError:  # a name too long for the file system, a loop of links
        return None
    return candidate if found else None


def _kind(relative: Path, final_step: str) -> str:
    """The newest export's Hugging Face folders are what the user takes home; the rest is resumable state."""
    top = relative.parts[0]
    if top == final_step and len(relative.parts) > 2 and relative.parts[1] in TAKE_HOME:
        return "final model"
    return "checkpoint" if top.startswith("step-") else "other"
