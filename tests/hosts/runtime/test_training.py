"""Whole jobs of real rank processes: uneven mixes, a resume on another mix, the final model.

Job A: 3 ranks, micro-batches [1, 2, 5], ZeRO 1, steps 1-30, a checkpoint every 15 steps.
Job B: resumes A's step-15 checkpoint on 2 ranks with [3, 5] under ZeRO 2 and trains to 60.
Both jobs use a global batch of 8, so B's steps 16-30 consume exactly A's samples and must
reproduce A's losses: nothing repeated, nothing skipped, the optimizer state carried over.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from statistics import mean

import pytest

from hosts.runtime.local import metrics
from kernel.logtext import is_library_noise
from kernel.modelspecs import resolve_model
from tests.support.ranks import TINY, run_job

SEQ = TINY["seq_len"]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    root = tmp_path_factory.mktemp("jobs")
    # B goes on past A's last step: a constant rate keeps the two runs' steps alike (a schedule is
    # shaped by each run's own length; tests/hosts/runtime/test_resume_matrix.py resumes with one).
    constant = {"hyperparameters": {"lr_scheduler": "constant"}}
    a = run_job(root / "a", [1, 2, 5], zero_stage=1, max_steps=30, checkpoint_every=15, **constant)
    b = run_job(
        root / "b",
        [3, 5],
        zero_stage=2,
        max_steps=60,
        checkpoint_every=0,
        resume_from=str(root / "a" / "checkpoints" / "step-15"),
        **constant,
    )
    return a, b


def test_every_rank_reports_the_same_global_loss_and_its_own_tokens(jobs):
    a, _ = jobs
    per_rank = [metrics(a.events(rank)) for rank in range(3)]
    assert all(sorted(m) == list(range(1, 31)) for m in per_rank)
    for step in range(1, 31):
        assert len({m[step]["loss"] for m in per_rank}) == 1
        assert [m[step]["tokens"] for m in per_rank] == [1 * SEQ, 2 * SEQ, 5 * SEQ]
        assert all(m[step]["samples_seen"] == 8 * step for m in per_rank)
    event = per_rank[2][30]
    assert event["tokens_per_s"] == pytest.approx(event["tokens"] / event["step_time_s"], rel=1e-3)
    assert event["memory_mb"] > 0


def test_the_loss_falls_on_the_synthetic_corpus(jobs):
    a, b = jobs
    losses = {
        **{s: e["loss"] for s, e in metrics(a.events(0)).items()},
        **{s: e["loss"] for s, e in metrics(b.events(0)).items()},
    }
    first, last = mean(losses[s] for s in range(1, 6)), mean(losses[s] for s in range(56, 61))
    assert first > 6.0
    assert last < first - 2.0, (first, last)


def test_a_resume_on_another_world_size_and_mix_continues_where_the_checkpoint_left_off(jobs):
    a, b = jobs
    before, after = metrics(a.events(0)), metrics(b.events(1))
    assert min(after) == 16 and sorted(after) == list(range(16, 61))
    assert after[16]["samples_seen"] == 15 * 8 + 8
    assert [after[16]["tokens"]] == [5 * SEQ]
    for step in range(16, 31):
        assert after[step]["loss"] == pytest.approx(before[step]["loss"], rel=1e-4), step
    assert after[16]["loss"] < before[1]["loss"] - 1.0  # not back to an untrained model


def test_checkpoints_are_reported_and_published_whole(jobs):
    a, b = jobs
    saved = [e for e in a.events(0) if e["event"] == "checkpoint"]
    assert [e["step"] for e in saved] == [15, 30]
    assert all(e["seconds"] > 0 and Path(e["path"]).is_dir() for e in saved)
    assert not any(e["event"] == "checkpoint" for e in a.events(1))  # rank 0 reports them
    root = Path(saved[0]["path"]).parent
    assert (root / "latest").read_text().strip() == "step-30"
    assert not [p for p in root.iterdir() if p.name.startswith(".")]
    meta = json.loads((root / "step-15" / "meta.json").read_text())
    assert (meta["step"], meta["samples_seen"], meta["world_size"], meta["zero_stage"]) == (15, 120, 3, 1)
    assert sorted(p.name for p in (root / "step-15").glob("rng-*.pt")) == ["rng-0.pt", "rng-1.pt", "rng-2.pt"]
    assert (root / "step-15" / "universal" / "zero").is_dir()  # converted for job B


def test_the_final_model_is_a_hugging_face_model_with_its_config(jobs):
    from transformers import AutoModelForCausalLM

    _, b = jobs
    done = [e for e in b.events(0) if e["event"] == "done"]
    assert done[0]["step"] == 60 and not done[0]["stopped"]
    final = Path(done[0]["path"])
    assert final.name == "step-60"
    model = AutoModelForCausalLM.from_pretrained(final / "model")
    assert type(model).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == resolve_model("llama-tiny").parameters
    assert sorted(p.name for p in (final / "model").iterdir()) == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
    ]


def test_rank_0_logs_step_loss_and_tokens_per_s_and_the_libraries_stay_quiet(jobs):
    a, _ = jobs
    lines = Path(a.stderr_path(0)).read_text().splitlines()
    others = Path(a.stderr_path(1)).read_text().splitlines()

    steps = [line for line in lines if line.startswith("step ")]
    assert re.fullmatch(r"step 1/30 · loss \d+\.\d{4} · [\d,]+ tokens/s · \d+\.\d\d s/step", steps[0])
    assert steps[-1].startswith("step 30/30 · loss ")
    assert not [line for line in others if line.startswith("step ")]  # one line per step for the job, not per rank
    assert [line for line in lines + others if is_library_noise(line)] == []
