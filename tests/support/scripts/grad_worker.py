"""One rank of the uneven-batch gradient test (run as a script with the torch.distributed env).

It backpropagates its slice of the first global batch through the runtime's own code path
(DeepSpeed engine, loss-token weighting, data sharding) and saves the gradient DeepSpeed hands
the optimizer, once per (mode, ZeRO stage) asked for.

usage: grad_worker.py LAUNCH_JSON OUT_DIR CASES (e.g. "full:0,full:2,lora:0")
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from deepspeed.utils import safe_get_full_grad

from hosts.runtime.data import SyntheticCorpus, shard
from hosts.runtime.engine import build_engine, init_distributed
from hosts.runtime.hfmodel import ModelSource, spec_from_dict
from hosts.runtime.train import forward_backward
from kernel.protocol import RankLaunch


class MaskedCorpus:
    """The synthetic corpus with a pseudo-random loss mask (about 1 target in 3 kept) per sample.

    Samples keep very different numbers of loss tokens, as chat data does, so weighting ranks by
    samples instead of loss tokens would show.
    """

    def __init__(self, vocab: int, seq_len: int, seed: int) -> None:
        self.inner, self.seed = SyntheticCorpus(vocab, seq_len, seed), seed

    def batch(self, start: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids, _ = self.inner.batch(start, count)
        masks = []
        for index in range(start, start + count):
            generator = torch.Generator().manual_seed(self.seed + index)
            keep = 0.1 + 0.8 * (index % 3) / 2  # 10%, 50% or 90% of the targets
            masks.append(torch.rand(ids.shape[1], generator=generator) < keep)
        return ids, torch.stack(masks)

    def loss_tokens(self, start: int, count: int) -> int:
        return int(self.batch(start, count)[1][:, 1:].sum())


def with_mode(launch: RankLaunch, mode: str, stage: int) -> RankLaunch:
    model = {**launch.model, "mode": mode, "lora": {"r": 4, "alpha": 8, "dropout": 0.0}}
    return dataclasses.replace(launch, zero_stage=stage, model=model)


def main(config: str, out: str, cases: str) -> None:
    launch = RankLaunch(**json.loads(Path(config).read_text()))
    spec = spec_from_dict(launch.model)
    placement = init_distributed(launch)
    corpus = MaskedCorpus(spec.vocab_size, spec.seq_len, launch.seed)
    first, count = shard(0, launch.micro_batches, launch.rank)
    batch = corpus.batch(first, count)
    global_loss_tokens = corpus.loss_tokens(0, sum(launch.micro_batches))
    for case in cases.split(","):
        mode, stage = case.split(":")
        case_launch = with_mode(launch, mode, int(stage))
        engine = build_engine(case_launch, ModelSource.from_launch(case_launch.model), placement)
        forward_backward(engine, batch, placement.world_size, global_loss_tokens)
        grads = {
            name: safe_get_full_grad(p).detach().clone()
            for name, p in engine.module.named_parameters()
            if p.requires_grad
        }
        torch.save(grads, Path(out) / f"grads-{mode}-stage{stage}-rank{launch.rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
