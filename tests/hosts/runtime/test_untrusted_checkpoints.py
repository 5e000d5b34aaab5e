"""A checkpoint is written by a host, and hosts are third parties (RELIABILITY.md 37): a rank that resumes
from one whose files carry a pickle naming a callable refuses it, and the callable never runs, whether the
file is DeepSpeed's own (loaded by DeepSpeed with weights_only=False) or one the runtime loads itself."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from tests.support.ranks import JOB_TIMEOUT_S, run_job, start_job

pytestmark = pytest.mark.slow


class CreatesAFile:
    """Unpickling this calls open(path, "w"): the file appears if the pickle ran."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A one-rank job's final checkpoint (no ZeRO), trained 2 steps."""
    root = tmp_path_factory.mktemp("untrusted")
    run_job(root / "a", [4], zero_stage=0, max_steps=2)
    return root / "a" / "checkpoints" / "step-2"


def tampered(saved: Path, tmp_path: Path, name: str, marker: Path) -> Path:
    """A copy of the checkpoint whose file `name` is a pickle that creates `marker` when loaded."""
    copy = tmp_path / "tampered" / "step-2"
    shutil.copytree(saved, copy)
    torch.save({"module": CreatesAFile(marker), "python": CreatesAFile(marker)}, copy / name)
    return copy


@pytest.mark.parametrize("name", ["ds/mp_rank_00_model_states.pt", "rng-0.pt"])
def test_a_checkpoint_carrying_a_pickled_callable_is_refused_and_runs_nothing(saved, tmp_path, name):
    marker = tmp_path / "the-pickle-ran"
    step_dir = tampered(saved, tmp_path, name, marker)

    job = start_job(tmp_path / "b", [4], zero_stage=0, max_steps=4, resume_from=str(step_dir))

    assert job.wait(JOB_TIMEOUT_S) == [1]
    assert not marker.exists()
    assert "Weights only load failed" in job.stderr_path(0).read_text()


def test_a_load_that_asks_for_pickles_is_weights_only_in_a_rank(tmp_path):
    """What DeepSpeed's converter and loader do (weights_only=False) is overridden once a rank starts."""
    from hosts.runtime.untrusted import load_weights_only

    marker = tmp_path / "the-pickle-ran"
    torch.save([CreatesAFile(marker)], tmp_path / "evil.pt")
    load_weights_only()

    with pytest.raises(Exception, match="Weights only load failed"):
        torch.load(tmp_path / "evil.pt", weights_only=False)
    assert not marker.exists()
