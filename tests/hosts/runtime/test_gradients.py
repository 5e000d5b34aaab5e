"""Uneven micro-batches, with uneven numbers of loss tokens, give exactly the gradient of the whole batch.

Each rank weights its summed token loss by the global batch's number of target tokens (masked
tokens left out), for full training and for a LoRA adapter alike.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hosts.runtime.hfmodel import ModelSource, build_model, token_loss_sum
from hosts.runtime.local import REPO, LocalJob, job_launches
from kernel.modelspecs import resolve_model
from tests.support.scripts.grad_worker import MaskedCorpus

WORKER = Path(__file__).resolve().parents[2] / "support" / "scripts" / "grad_worker.py"
MICRO_BATCHES = [1, 2, 5]
CASES = (("full", 0), ("full", 2), ("lora", 0))
SEED = 1234
SPEC = resolve_model("llama-tiny")


def source(mode: str) -> ModelSource:
    return ModelSource.from_launch({**SPEC.as_dict(), "mode": mode, "lora": {"r": 4, "alpha": 8, "dropout": 0.0}})


def reference_gradients(mode: str) -> dict[str, torch.Tensor]:
    """One process, the same 8 samples, the plain mean loss over their target tokens."""
    model = build_model(source(mode), SEED)
    ids, mask = MaskedCorpus(SPEC.vocab_size, SPEC.seq_len, SEED).batch(0, sum(MICRO_BATCHES))
    loss_sum, tokens = token_loss_sum(model, ids, mask)
    (loss_sum / tokens).backward()
    return {name: p.grad for name, p in model.named_parameters() if p.requires_grad}


@pytest.fixture(scope="module")
def rank_gradients(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("grads")
    launches = job_launches(MICRO_BATCHES, out, model=SPEC.as_dict(), seed=SEED)
    procs = []
    for launch in launches:
        config = out / f"launch-{launch.rank}.json"
        config.write_text(json.dumps(dataclasses.asdict(launch)))
        env = {**os.environ, **LocalJob._dist_env(launch), "PYTHONPATH": str(REPO), "DS_ACCELERATOR": "cpu"}
        cases = ",".join(f"{mode}:{stage}" for mode, stage in CASES)
        cmd = [sys.executable, str(WORKER), str(config), str(out), cases]
        procs.append(subprocess.Popen(cmd, env=env, cwd=REPO, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err[-3000:]
    return out


def flat(grads: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([grads[name].flatten() for name in sorted(grads)])


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """|got - want| / |want|; a zero reference (LoRA's A matrices while B is still zero) must be met exactly."""
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize(("mode", "stage"), CASES)
def test_uneven_micro_batches_give_the_whole_batch_gradient(rank_gradients, mode, stage):
    want = reference_gradients(mode)
    for rank in range(len(MICRO_BATCHES)):
        got = torch.load(rank_gradients / f"grads-{mode}-stage{stage}-rank{rank}.pt")
        assert got.keys() == want.keys()
        whole = relative_error(flat(got), flat(want))
        worst = max(want, key=lambda name: relative_error(got[name], want[name]))
        # fp32 sums in another order: ~1e-7 overall, a few 1e-6 at most per tensor.
        assert whole < 1e-6, (mode, stage, rank, whole)
        assert relative_error(got[worst], want[worst]) < 5e-6, (mode, stage, rank, worst)


def test_weighting_ranks_by_samples_instead_of_loss_tokens_would_not_pass_this_check():
    """The tolerance is meaningful: the mean of per-rank mean losses is off when loss tokens differ."""
    corpus = MaskedCorpus(SPEC.vocab_size, SPEC.seq_len, SEED)
    want = reference_gradients("full")
    model = build_model(source("full"), SEED)
    start = 0
    for count in MICRO_BATCHES:
        ids, mask = corpus.batch(start, count)
        loss_sum, tokens = token_loss_sum(model, ids, mask)
        (loss_sum / tokens * count / sum(MICRO_BATCHES)).backward()
        start += count
    got = {name: p.grad for name, p in model.named_parameters()}
    assert max(relative_error(got[name], want[name]) for name in want) > 1e-3
