"""Train on spot chips: look at the clearing price, bid a little above it, raise the bid if it isn't winning.

    export STARVERSE_URL=http://127.0.0.1:8000 STARVERSE_API_KEY=sv_...
    python examples/spot_bid.py --chip tpu-v5e --max-steps 150

A spot job pays the clearing price (at most its bid) and may be moved when its chips are
reclaimed; `allow_on_demand` lets it fall back to on-demand chips meanwhile.
"""

from __future__ import annotations

import argparse
import sys
import time
from decimal import Decimal

import starverse
from starverse.training import follow_run


def latest_price(client: starverse.Client, chip: str) -> Decimal:
    """The last clearing price of a chip type, else its listed spot price."""
    history = client.get("prices/history/", chip=chip)["results"]
    if history:
        return Decimal(history[0]["price_per_hour"])
    listed = next(c for c in client.chips() if c["slug"] == chip)
    return Decimal(listed["spot_price"] or listed["on_demand_price"])


def raise_losing_bids(client: starverse.Client, job_id: int, step: Decimal, cap: Decimal) -> None:
    for bid in client.bids(status="active", job=job_id):
        price = Decimal(bid["max_price"])
        if bid["won_chips"] < bid["chips"] and price + step <= cap:
            client.update_bid(bid["id"], max_price=price + step)
            print(
                f"bid {bid['id']} on {bid['chip']}: won {bid['won_chips']}/{bid['chips']}, raised to ¥{price + step}/h"
            )


def main(chip: str = "tpu-v5e", max_steps: int = 150, cap: Decimal = Decimal("10")) -> starverse.Run:
    client = starverse.Client()
    price = latest_price(client, chip)
    bid = min(cap, (price * Decimal("1.10")).quantize(Decimal("0.01")))
    print(f"{chip} clears at ¥{price}/h; bidding ¥{bid}/h (cap ¥{cap}/h)")
    cluster = starverse.accelerate(
        model_id="llama-tiny", max_budget=28, client=client, spot=True, bid=str(bid), allow_on_demand=True
    )
    print(cluster.plan)
    run = starverse.Trainer(cluster).fit("llama-tiny", max_steps=max_steps, follow=False)
    print(f"submitted spot job {run.id}")
    deadline = time.monotonic() + 30
    while not run.refresh().finished and run.status in {"queued", "planning", "provisioning"}:
        if time.monotonic() > deadline:
            raise_losing_bids(client, run.id, step=(bid * Decimal("0.10")).quantize(Decimal("0.01")), cap=cap)
            deadline = time.monotonic() + 30
        time.sleep(2)
    follow_run(run)
    print(run)
    for bid_row in client.bids(job=run.id):
        print(f"bid {bid_row['id']}: {bid_row['status']}, won {bid_row['won_chips']} at ¥{bid_row['clearing_price']}/h")
    return run


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chip", default="tpu-v5e")
    parser.add_argument("--max-steps", type=int, default=150)
    parser.add_argument("--cap", type=Decimal, default=Decimal("10"), help="Never bid more than this per chip-hour.")
    args = parser.parse_args()
    try:
        finished = main(args.chip, args.max_steps, args.cap)
    except starverse.StarverseError as error:
        sys.exit(f"{type(error).__name__}: {error}")
    sys.exit(0 if finished.succeeded else 1)
