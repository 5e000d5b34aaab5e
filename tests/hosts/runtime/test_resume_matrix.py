"""Resuming across ZeRO stages and world sizes continues the very same training run.

Job C trains 12 steps on 2 ranks without ZeRO (fp32: the whole optimizer state sits in one
file). The others resume from C's checkpoints, or from each other's, with a global batch of 8
throughout, so each must reproduce C's losses step for step:
- D: ZeRO 2 on 3 ranks from C's step 6 (no-ZeRO checkpoint -> universal -> ZeRO loader);
- E: no ZeRO on 1 rank from D's step 9 (ZeRO shards -> ds_to_universal -> plain loader);
- F: no ZeRO on 1 rank from C's step 6 (DeepSpeed's own load; nothing to convert).
"""

from __future__ import annotations

import pytest

from hosts.runtime.local import metrics
from tests.support.ranks import run_job

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def resume_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("matrix")
    c = run_job(root / "c", [3, 5], zero_stage=0, max_steps=12, checkpoint_every=6)
    c_ckpt = root / "c" / "checkpoints"
    d = run_job(
        root / "d",
        [1, 2, 5],
        zero_stage=2,
        max_steps=12,
        checkpoint_every=3,
        resume_from=str(c_ckpt / "step-6"),
    )
    e = run_job(root / "e", [8], zero_stage=0, max_steps=12, resume_from=str(root / "d" / "checkpoints" / "step-9"))
    f = run_job(root / "f", [8], zero_stage=0, max_steps=12, resume_from=str(c_ckpt / "step-6"))
    return {"c": c, "d": d, "e": e, "f": f}


def losses(job) -> dict[int, float]:
    return {step: event["loss"] for step, event in metrics(job.events(0)).items()}


@pytest.mark.parametrize(
    ("name", "first", "how"), [("d", 7, "universal"), ("e", 10, "universal-plain"), ("f", 7, "native")]
)
def test_a_resumed_job_reproduces_the_uninterrupted_losses(resume_runs, name, first, how):
    reference, resumed = losses(resume_runs["c"]), losses(resume_runs[name])
    assert sorted(resumed) == list(range(first, 13))
    for step in resumed:
        assert resumed[step] == pytest.approx(reference[step], rel=1e-4), (name, step)
    assert f"resumed {how} from" in resume_runs[name].stderr_path(0).read_text()
