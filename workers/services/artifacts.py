"""What a job leaves behind in object storage: its checkpoints and final model, listed and served safely.

A job's checkpoints are trees under checkpoints/job-<id>/: `step-<n>/` (DeepSpeed state, meta.json, RNG
files; the exported `model/` and `adapter/` in final and stop checkpoints) and, made on demand,
`step-<n>/universal/`. Only files of complete trees (their manifest written) are artifacts: a save that
crashed, or one still uploading, is never listed or served. Manifests themselves are bookkeeping, not
artifacts.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from fleet.models import Job
from kernel.storage import StorageError, check_key
from kernel.storage.locations import is_stored, key_of
from kernel.storage.trees import MANIFEST, read_manifest
from workers.services.placement import checkpoint_prefix
from workers.services.storage import platform_store

logger = logging.getLogger(__name__)

FINAL_MODEL, CHECKPOINT = "final model", "checkpoint"  # an artifact's kind
TAKE_HOME = {"model", "adapter"}  # the Hugging Face folders an exported checkpoint holds
UNIVERSAL = "universal"
MAX_PATH, MAX_NAME = 512, 255


@dataclass(frozen=True)
class Artifact:
    path: str  # relative to the job's checkpoints: step-100/model/config.json
    size_bytes: int
    kind: str


def list_artifacts(job: Job) -> list[Artifact]:
    """Every file of the job's complete checkpoint trees in natural path order (step-20 before step-100);
    [] when storage can't be read."""
    prefix = checkpoint_prefix(job)
    try:
        objects = [(item.key[len(prefix) + 1 :], item.size) for item in platform_store().list(prefix)]
    except StorageError as error:
        logger.warning("listing the artifacts of job %s failed: %s", job.pk, error)
        return []
    complete = {relative.removesuffix("/" + MANIFEST) for relative, _ in objects if relative.endswith("/" + MANIFEST)}
    final = final_step_name(job)
    artifacts = [
        Artifact(relative, size, _kind(relative, final))
        for relative, size in objects
        if tree_of(relative) in complete and not relative.endswith("/" + MANIFEST)
    ]
    return ordered(artifacts)


NUMBER = re.compile(r"(\d+)")
STEP_NAME = re.compile(r"step-(\d+)")


def natural_key(path: str) -> tuple:
    """Sorts numbers inside names as numbers: step-20 < step-100, mp_rank_2 < mp_rank_10."""
    # Only the runs NUMBER matched: "²" passes str.isdigit() but int() refuses it.
    return tuple(int(part) if NUMBER.fullmatch(part) else part for part in NUMBER.split(path))


def step_of(relative: str) -> int | None:
    """The step of the checkpoint tree a file belongs to (`step-240/...` is 240); None outside one."""
    found = STEP_NAME.fullmatch(relative.split("/", 1)[0])
    return int(found[1]) if found else None


@dataclass(frozen=True)
class CheckpointFiles:
    """One checkpoint (its tree and its universal form): the files that resume training from a step."""

    step: int
    files: list[Artifact]

    @property
    def size_bytes(self) -> int:
        return sum(artifact.size_bytes for artifact in self.files)


@dataclass(frozen=True)
class ArtifactGroups:
    """The job page's view of the artifacts: the final model first, then checkpoints, newest first, then
    anything else, instead of one long list sorted as text."""

    final_model: list[Artifact] = field(default_factory=list)
    final_step: int | None = None
    checkpoints: list[CheckpointFiles] = field(default_factory=list)
    other: list[Artifact] = field(default_factory=list)

    @property
    def final_size_bytes(self) -> int:
        return sum(artifact.size_bytes for artifact in self.final_model)

    def __bool__(self) -> bool:
        return bool(self.final_model or self.checkpoints or self.other)


def ordered(files: list[Artifact]) -> list[Artifact]:
    return sorted(files, key=lambda artifact: natural_key(artifact.path))


def group_artifacts(artifacts: list[Artifact]) -> ArtifactGroups:
    """Split `list_artifacts` into the final model, the checkpoints by step (newest first) and the rest."""
    final = [artifact for artifact in artifacts if artifact.kind == FINAL_MODEL]
    by_step: dict[int, list[Artifact]] = {}
    other = []
    for artifact in artifacts:
        if artifact.kind == FINAL_MODEL:
            continue
        step = step_of(artifact.path)
        if step is None:
            other.append(artifact)
        else:
            by_step.setdefault(step, []).append(artifact)
    return ArtifactGroups(
        final_model=ordered(final),
        final_step=step_of(final[0].path) if final else None,
        checkpoints=[CheckpointFiles(step, ordered(by_step[step])) for step in sorted(by_step, reverse=True)],
        other=ordered(other),
    )


@dataclass(frozen=True)
class StoredArtifact:
    key: str
    size_bytes: int
    filename: str  # the file's own name


def stored_artifact(job: Job, relative: str) -> StoredArtifact | None:
    """The stored file `relative` of the job's checkpoints when a complete tree lists it; else None (never a
    key outside the job's checkpoints). Raises StorageError when storage can't be read."""
    try:
        check_key(relative)
    except StorageError:  # '..', '//', a leading '/', NUL: no file of this job is named so
        return None
    if len(relative) > MAX_PATH or any(len(part) > MAX_NAME for part in relative.split("/")):
        return None  # longer than any name the runtime writes (and than some stores accept)
    tree = tree_of(relative)
    if tree is None or relative == f"{tree}/{MANIFEST}":
        return None
    manifest = read_manifest(platform_store(), f"{checkpoint_prefix(job)}/{tree}")
    entry = manifest.files.get(relative[len(tree) + 1 :]) if manifest else None
    if entry is None:
        return None
    return StoredArtifact(f"{checkpoint_prefix(job)}/{relative}", entry.size, relative.rsplit("/", 1)[-1])


def tree_of(relative: str) -> str | None:
    """The tree a checkpoint file belongs to: `step-<n>/universal` for the universal form, else `step-<n>`."""
    parts = relative.split("/")
    if len(parts) < 2 or not parts[0].startswith("step-"):
        return None
    if len(parts) > 2 and parts[1] == UNIVERSAL:
        return f"{parts[0]}/{UNIVERSAL}"
    return parts[0]


def final_step_name(job: Job) -> str:
    """`step-<n>` of the job's newest checkpoint (its final or stop checkpoint once it has ended)."""
    latest = job.latest_checkpoint
    if latest and is_stored(latest):
        return key_of(latest).rsplit("/", 1)[-1]
    return f"step-{job.max_steps}"


def _kind(relative: str, final_step: str) -> str:
    """The newest export's Hugging Face folders are what the user takes home; the rest is resumable state."""
    parts = relative.split("/")
    if parts[0] == final_step and len(parts) > 2 and parts[1] in TAKE_HOME:
        return FINAL_MODEL
    return CHECKPOINT
