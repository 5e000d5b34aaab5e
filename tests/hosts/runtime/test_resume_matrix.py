"""Resuming across ZeRO stages and world sizes continues the very same training run.

Job C trains 12 steps on 2 ranks without ZeRO (fp32: the whole optimizer state sits in one
file). The others resume from C's checkpoints, or from each other's, with a global batch of 8
throughout, so each must reproduce C's losses step for step:
- D: ZeRO 2 on 3 ranks from C's step 6 (no-ZeRO checkpoint -> universal -> ZeRO loader);
- E: no ZeRO on 1 rank from D's step 9 (ZeRO shards -> ds_to_universal -> plain loader);
- F: no ZeRO on 1 rank from C's step 6 (DeepSpeed's own load; nothing to convert).

All four run a warm-up then a cosine schedule: every resumed step must also have C's learning rate.
"""

from __future__ import annotations

import json

import pytest

from hosts.runtime.local import metrics
from tests.support.ranks import run_job

pytestmark = pytest.mark.slow


SCHEDULE = {"lr_scheduler": "cosine", "warmup_steps": 3, "min_lr_ratio": 0.1, "learning_rate": 3e-3}


@pytest.fixture(scope="module")
def resume_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("matrix")
    common = {"max_steps": 12, "hyperparameters": SCHEDULE}
    c = run_job(root / "c", [3, 5], zero_stage=0, checkpoint_every=6, **common)
    c_ckpt = root / "c" / "checkpoints"
    d = run_job(
        root / "d",
        [1, 2, 5],
        zero_stage=2,
        checkpoint_every=3,
        resume_from=str(c_ckpt / "step-6"),
        **common,
    )
    e = run_job(root / "e", [8], zero_stage=0, resume_from=str(root / "d" / "checkpoints" / "step-9"), **common)
    f = run_job(root / "f", [8], zero_stage=0, resume_from=str(c_ckpt / "step-6"), **common)
    return {"c": c, "d": d, "e": e, "f": f}


def losses(job) -> dict[int, float]:
    return {step: event["loss"] for step, event in metrics(job.events(0)).items()}


def rates(job) -> dict[int, float]:
    return {step: event["lr"] for step, event in metrics(job.events(0)).items()}


@pytest.mark.parametrize(
    ("name", "first", "how"), [("d", 7, "universal"), ("e", 10, "universal-plain"), ("f", 7, "native")]
)
def test_a_resumed_job_reproduces_the_uninterrupted_losses(resume_runs, name, first, how):
    reference, resumed = losses(resume_runs["c"]), losses(resume_runs[name])
    assert sorted(resumed) == list(range(first, 13))
    for step in resumed:
        assert resumed[step] == pytest.approx(reference[step], rel=1e-4), (name, step)
    assert f"resumed {how} from" in resume_runs[name].stderr_path(0).read_text()


@pytest.mark.parametrize(("name", "first"), [("d", 7), ("e", 10), ("f", 7)])
def test_a_resumed_job_goes_on_at_the_uninterrupted_learning_rate(resume_runs, name, first):
    reference, resumed = rates(resume_runs["c"]), rates(resume_runs[name])
    assert [reference[step] for step in (1, 2, 3)] == pytest.approx([1e-3, 2e-3, 3e-3])  # warm-up
    assert reference[12] == pytest.approx(3e-4)  # the cosine's floor at the last step
    decaying = [reference[step] for step in range(4, 13)]  # from the peak down
    assert decaying == sorted(decaying, reverse=True) and len(set(decaying)) == len(decaying)
    assert {step: resumed[step] for step in resumed} == pytest.approx({step: reference[step] for step in resumed})


def test_a_checkpoint_records_where_the_schedule_stands(resume_runs):
    meta = json.loads((resume_runs["c"].workdir / "checkpoints" / "step-6" / "meta.json").read_text())
    assert meta["schedule"]["step"] == 6 and meta["schedule"]["total_steps"] == 12
    assert meta["schedule"]["next_lr"] == pytest.approx(rates(resume_runs["c"])[7])
    assert meta["schedule"]["hyperparameters"]["lr_scheduler"] == "cosine"
