"""Uneven micro-batches give exactly the gradient of the whole global batch."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from workers.modelspecs import resolve_model
from workers.runtime.data import SyntheticCorpus
from workers.runtime.engine import build_model
from workers.runtime.local import REPO, LocalJob, job_launches
from workers.runtime.model import token_loss_sum

WORKER = Path(__file__).with_name("grad_worker.py")
MICRO_BATCHES = [1, 2, 5]
STAGES = (0, 2)
SEED = 1234


def reference_gradients() -> dict[str, torch.Tensor]:
    """One process, the same 8 samples, the plain mean token loss."""
    spec = resolve_model("llama-tiny")
    model = build_model(spec, SEED)
    batch = SyntheticCorpus(spec.vocab_size, spec.seq_len, SEED).batch(0, sum(MICRO_BATCHES))
    (token_loss_sum(model, batch) / batch[:, 1:].numel()).backward()
    return {name: p.grad for name, p in model.named_parameters()}


def run_ranks(tmp_path: Path) -> None:
    launches = job_launches(MICRO_BATCHES, tmp_path, model=resolve_model("llama-tiny").as_dict(), seed=SEED)
    procs = []
    for launch in launches:
        config = tmp_path / f"launch-{launch.rank}.json"
        config.write_text(json.dumps(dataclasses.asdict(launch)))
        env = {**os.environ, **LocalJob._dist_env(launch), "PYTHONPATH": str(REPO), "DS_ACCELERATOR": "cpu"}
        cmd = [sys.executable, str(WORKER), str(config), str(tmp_path), ",".join(map(str, STAGES))]
        procs.append(subprocess.Popen(cmd, env=env, cwd=REPO, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]


def flat(grads: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([grads[name].flatten() for name in sorted(grads)])


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got - want).norm() / want.norm()).item()


def test_uneven_micro_batches_give_the_full_batch_gradient_at_zero_stages_0_and_2(tmp_path):
    run_ranks(tmp_path)
    want = reference_gradients()
    for stage in STAGES:
        for rank in range(len(MICRO_BATCHES)):
            got = torch.load(tmp_path / f"grads-stage{stage}-rank{rank}.pt")
            assert got.keys() == want.keys()
            whole = relative_error(flat(got), flat(want))
            worst = max(want, key=lambda name: relative_error(got[name], want[name]))
            # fp32 sums over 512 tokens in another order: ~1e-7 overall, under 1e-6 per tensor.
            assert whole < 1e-6, (stage, rank, whole)
            assert relative_error(got[worst], want[worst]) < 2e-6, (stage, rank, worst)


def test_an_even_split_would_not_pass_this_check():
    """The tolerance is meaningful: weighting ranks equally (mean of per-rank means) is off."""
    spec = resolve_model("llama-tiny")
    corpus = SyntheticCorpus(spec.vocab_size, spec.seq_len, SEED)
    want = reference_gradients()
    model = build_model(spec, SEED)
    start = 0
    for count in MICRO_BATCHES:
        batch = corpus.batch(start, count)
        (token_loss_sum(model, batch) / batch[:, 1:].numel() / len(MICRO_BATCHES)).backward()
        start += count
    got = {name: p.grad for name, p in model.named_parameters()}
    assert max(relative_error(got[name], want[name]) for name in want) > 1e-3
