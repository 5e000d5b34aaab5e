"""A quote's plan (`starverse.Plan`, also `starverse.Quote`): which chips, how fast, how many steps, what it
costs; and how the SDK and CLI describe it."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from starverse.amounts import cents


@dataclass
class Plan:
    """A quote: which chips, how fast, how many steps, what it costs. `print(plan)` shows it as a small table."""

    data: dict

    @property
    def chip_counts(self) -> dict[str, int]:
        """Chips per type, on-demand and spot together."""
        return {chip: chip_total(modes) for chip, modes in (self.data.get("chip_counts") or {}).items()}

    @property
    def tokens_per_s(self) -> float:
        return float(self.data.get("tokens_per_s") or 0)

    @property
    def price_per_hour(self) -> Decimal:
        return Decimal(self.data.get("price_per_hour") or "0")

    @property
    def eta_seconds(self) -> float:
        return float(self.data.get("eta_seconds") or 0)

    @property
    def total_cost(self) -> Decimal:
        return Decimal(self.data.get("total_cost") or "0")

    @property
    def steps(self) -> int:
        """The steps the job trains: its `max_steps`, or those `n_epochs` over its dataset work out to."""
        return int(self.data.get("steps") or 0)

    @property
    def islands(self) -> list[dict]:
        """The plan's islands: the ranks of one software stack each ({"index", "stack", "simulated",
        "chips", "ranks", "batch", "tokens_per_s"}); one island when every chip is of one stack."""
        return list(self.data.get("islands") or [])

    @property
    def sync(self) -> dict | None:
        """How several islands keep in step: {"mode": "step" | "diloco", "sync_every", "bridge_gbps",
        "bridge_source" ("measured" | "declared" | "default"), "bytes_per_step", "seconds_per_sync", "exact",
        "overlapped" (diloco: each sync crosses while the next steps train, and lands a round late)};
        None for one island."""
        return self.data.get("sync")

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __str__(self) -> str:
        chips = ", ".join(describe_chips(self.data.get("chip_counts") or {})) or "none"
        lines = [
            f"Plan for {self.data.get('model')} ({self.data.get('policy')})",
            f"  chips       {chips}",
            f"  throughput  {self.tokens_per_s:,.0f} tokens/s",
            f"  price       ¥{cents(self.price_per_hour)}/h",
            f"  ETA         {format_duration(self.eta_seconds)} for {self.data.get('tokens_per_step', 0):,} "
            "tokens/step",
            f"  total       ¥{cents(self.total_cost)}",
        ]
        if self.steps:
            lines.insert(-1, f"  steps       {self.steps:,}")
        if self.sync:
            lines.insert(2, f"  islands     {describe_islands(self.islands, self.sync)}")
        baseline = self.data.get("baseline")
        if baseline and self.data.get("speedup_vs_baseline"):
            best = ", ".join(describe_chips(baseline.get("chip_counts") or {}))
            lines.append(
                f"  vs {best}: {self.data['speedup_vs_baseline']:.2f}× the speed, "
                f"{self.data.get('cost_ratio_vs_baseline') or 0:.2f}× the cost"
            )
        return "\n".join(lines)

    __repr__ = __str__


def describe_islands(islands: list[dict], sync: dict) -> str:
    """ "3 (cuda-simulated, xla-simulated, cann-simulated), diloco, synced every 40 steps: close to one world,
    not exactly it; bridge 1.0 Gbit/s (default)" """
    names = ", ".join(str(island.get("island") or island.get("stack")) for island in islands)
    if sync.get("mode") == "step":
        how = "gradients synced every step: exactly one world"
    else:
        how = f"diloco, synced every {sync.get('sync_every')} steps: close to one world, not exactly it"
        if sync.get("overlapped"):
            how += " (each sync overlaps the next steps)"
    source = f" ({sync['bridge_source']})" if sync.get("bridge_source") else ""
    return f"{len(islands)} ({names}), {how}; bridge {sync.get('bridge_gbps')} Gbit/s{source}"


def chip_total(modes: dict | int) -> int:
    """A plan counts chips per type and mode ({"rtx-4090": {"on_demand": 1, "spot": 2}})."""
    return sum(modes.values()) if isinstance(modes, dict) else int(modes)


def describe_chips(chip_counts: dict) -> list[str]:
    described = []
    for chip, modes in chip_counts.items():
        if isinstance(modes, dict):
            described += [f"{count}× {chip}" + (" (spot)" if mode == "spot" else "") for mode, count in modes.items()]
        else:
            described.append(f"{modes}× {chip}")
    return described


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


Quote = Plan
