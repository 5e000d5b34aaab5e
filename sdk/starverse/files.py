"""What the SDK moves as files: datasets up, checkpoints and TensorBoard event files down (the Client's methods).

Downloads stream to a temporary file first and unpack into a target folder; a member that would land
outside it is refused (tarfile's `data` filter).
"""

from __future__ import annotations

import tarfile
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from starverse.objects import Checkpoints, Dataset, Event

if TYPE_CHECKING:
    from starverse.client import Client

API_PREFIX = "/api/v1"
DOWNLOAD_TIMEOUT = httpx.Timeout(30.0, read=600.0)  # a model is gigabytes: allow slow reads
# The platform checks an upload in full before it answers.
UPLOAD_READ_TIMEOUT_S = 900.0


class FileCalls:
    """Datasets, checkpoints and TensorBoard files: mixed into `starverse.Client`."""

    # -- datasets ------------------------------------------------------------------------------------

    def datasets(self: Client) -> list[Dataset]:
        """Your uploaded datasets; a job trains on one by its `reference` (upload:<id>)."""
        return [Dataset.from_api(item) for item in self.pages("datasets/")]

    def dataset(self: Client, dataset_id: int) -> Dataset:
        return Dataset.from_api(self.get(f"datasets/{int(dataset_id)}/"))

    def upload_dataset(self: Client, path: str | Path, name: str | None = None) -> Dataset:
        """Upload a text or JSONL file (`{"text"}`, chat `{"messages"}` or `{"prompt", "completion"}` records).

        The platform checks it line by line before it keeps it: a refusal is a ValidationError on `file`
        saying which line and why; one over the size limit an APIError with status 413.
        """
        source = Path(path).expanduser()
        if not source.is_file():
            raise FileNotFoundError(f"No dataset file at {source}.")
        with open(source, "rb") as file:
            answer = self.request(
                "POST",
                "datasets/",
                files={"file": (source.name, file, "application/octet-stream")},
                data={"name": name} if name else None,
                timeout=httpx.Timeout(self.http.timeout.connect, read=UPLOAD_READ_TIMEOUT_S),
            )
        return Dataset.from_api(answer)

    def delete_dataset(self: Client, dataset_id: int) -> None:
        """Delete one of your datasets (a ValidationError on `dataset` while a job uses it)."""
        self.request("DELETE", f"datasets/{int(dataset_id)}/")

    # -- a job's checkpoints, events and TensorBoard files -------------------------------------------

    def checkpoints(self: Client, job_id: int) -> Checkpoints:
        """A job's checkpoints, newest step first (`.retention`: how long the platform keeps them)."""
        return Checkpoints.from_api(self.get(f"jobs/{int(job_id)}/checkpoints/"))

    def download_checkpoint(self: Client, job_id: int, step: int, target: str | Path, *, merged: bool = False) -> Path:
        """Download one checkpoint as a Hugging Face model (a LoRA job's: its adapter; `merged`: the merged
        weights, final and stop checkpoints only) and unpack it into `target`; returns its folder,
        `job-<id>-step-<n>-model` (or `-adapter`). A checkpoint saved without its model raises Conflict
        (`checkpoint_not_exported`); an unknown step NotFound naming the steps there are."""
        params = {"merged": "true"} if merged else None
        return self.download_tar(f"jobs/{int(job_id)}/checkpoints/{int(step)}/download/", target, params)

    def delete_checkpoint(self: Client, job_id: int, step: int) -> None:
        """Delete a checkpoint; the one a job that has not ended resumes from raises Conflict
        (`checkpoint_in_use`)."""
        self.request("DELETE", f"jobs/{int(job_id)}/checkpoints/{int(step)}/")

    def download_tensorboard(self: Client, job_id: int, target: str | Path) -> Path:
        """Download a job's TensorBoard event files into `target`; returns `target/job-<id>-tensorboard`
        (`tensorboard --logdir` it). NotFound (`tensorboard_not_ready`) before its first checkpoint."""
        return self.download_tar(f"jobs/{int(job_id)}/tensorboard/", target)

    def events(self: Client, job_id: int) -> list[Event]:
        """What happened to a job, oldest first, as typed events (`job_events` gives the JSON)."""
        return [Event.from_api(item) for item in self.job_events(job_id)]

    # -- the transport of a download -----------------------------------------------------------------

    def download_tar(self: Client, path: str, target: str | Path, params: dict[str, Any] | None = None) -> Path:
        """GET a tar under /api/v1/, unpack it into `target` (created) and return the one folder it holds."""
        target = Path(target).expanduser()
        target.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile() as scratch:
            url = f"{API_PREFIX}/{path.lstrip('/')}"
            with self.http.stream("GET", url, params=params, timeout=DOWNLOAD_TIMEOUT) as response:
                if response.status_code >= 400:
                    response.read()
                    self.answer(response)
                for chunk in response.iter_bytes(1 << 20):
                    scratch.write(chunk)
            scratch.seek(0)
            with tarfile.open(fileobj=scratch) as archive:
                names = {member.name.split("/", 1)[0] for member in archive.getmembers()}
                archive.extractall(target, filter="data")
        if len(names) != 1:
            return target
        (folder,) = names
        return target / folder
