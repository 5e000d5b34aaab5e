"""Real rank processes on this host for tests, no Django: a llama-tiny job started or run to its end."""

from __future__ import annotations

from pathlib import Path

from hosts.runtime.local import LocalJob, job_launches
from kernel.modelspecs import resolve_model

TINY = resolve_model("llama-tiny").as_dict()


JOB_TIMEOUT_S = 120


def start_job(workdir: Path, micro_batches: list[int], **fields) -> LocalJob:
    """A llama-tiny job's ranks, started; `fields` override RankLaunch fields."""
    fields.setdefault("model", TINY)
    fields.setdefault("checkpoint_every", 0)
    fields.setdefault("run_dir", workdir / "run")
    run_dir = Path(fields.pop("run_dir"))
    run_dir.mkdir(parents=True, exist_ok=True)
    fields.setdefault("checkpoint_dir", str(workdir / "checkpoints"))
    return LocalJob(job_launches(micro_batches, run_dir, **fields), workdir).start()


def run_job(workdir: Path, micro_batches: list[int], **fields) -> LocalJob:
    """Run a job to completion; fails the test with the ranks' stderr if one fails."""
    job = start_job(workdir, micro_batches, **fields)
    codes = job.wait(JOB_TIMEOUT_S)
    assert codes == [0] * len(micro_batches), job.stderr_tail()
    return job
