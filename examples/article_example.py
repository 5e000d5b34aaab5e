"""The article's example, on this platform: quote a mixed cluster, train llama-tiny, follow it to the end.

Start the platform with `make run` (it brings up a demo fleet of simulated chips), create a token
on the dashboard's API tokens page or with `starverse login`, then:

    export STARVERSE_URL=http://127.0.0.1:8000 STARVERSE_API_KEY=sv_...
    python examples/article_example.py            # 200 steps, a few minutes on the demo fleet

The article quotes meta-llama/Llama-2-70b-hf; the demo fleet (four single simulated chips) can't
hold a 70B model, so here the quote is for the model that is trained. On a fleet that can, pass
`--model-id meta-llama/Llama-2-70b-hf` to see that plan. Ctrl-C while it trains asks whether to cancel.
"""

from __future__ import annotations

import argparse
import sys

import starverse


def main(model_id: str = "llama-tiny", max_steps: int = 200, max_budget: float = 28, progress: bool = True):
    cluster = starverse.accelerate(model_id=model_id, policy="cost-performance", max_budget=max_budget)
    print(cluster.plan)  # chips, tokens/s, ¥/h, ETA
    with cluster.mixed_mesh():
        model = starverse.MetaParallel(starverse.ModelConfig.from_pretrained("llama-tiny"))
    run = starverse.Trainer(cluster).fit(
        model, dataset="synthetic", per_device_batch_size=4, max_steps=max_steps, progress=progress
    )
    print(run)
    print(f"status={run.status} loss={run.loss} cost=¥{run.cost} migrations={len(run.migrations)}")
    return run


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-id", default="llama-tiny")
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--max-budget", type=float, default=28)
    args = parser.parse_args()
    try:
        finished = main(args.model_id, args.max_steps, args.max_budget)
    except starverse.StarverseError as error:
        sys.exit(f"{type(error).__name__}: {error}")
    sys.exit(0 if finished.succeeded else 1)
