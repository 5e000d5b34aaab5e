"""One rank of the uneven-batch gradient test (run as a script with the torch.distributed env).

It backpropagates its slice of the first global batch through the runtime's own code path
(DeepSpeed engine, loss scaling, data sharding) and saves the gradient DeepSpeed hands the
optimizer, once per ZeRO stage asked for.

usage: grad_worker.py LAUNCH_JSON OUT_DIR STAGES (e.g. "0,2")
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from deepspeed.utils import safe_get_full_grad

from workers.protocol import RankLaunch
from workers.runtime.data import open_corpus, shard
from workers.runtime.engine import build_engine, init_distributed
from workers.runtime.model import spec_from_dict
from workers.runtime.train import forward_backward


def main(config: str, out: str, stages: str) -> None:
    launch = RankLaunch(**json.loads(Path(config).read_text()))
    spec = spec_from_dict(launch.model)
    placement = init_distributed(launch)
    first, count = shard(0, launch.micro_batches, launch.rank)
    batch = open_corpus(launch.dataset, spec, launch.seed).batch(first, count)
    global_tokens = sum(launch.micro_batches) * spec.seq_len
    for stage in (int(s) for s in stages.split(",")):
        engine = build_engine(dataclasses.replace(launch, zero_stage=stage), spec, placement)
        forward_backward(engine, batch, placement.world_size, global_tokens)
        grads = {name: safe_get_full_grad(p).detach().clone() for name, p in engine.module.named_parameters()}
        torch.save(grads, Path(out) / f"grads-stage{stage}-rank{launch.rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
