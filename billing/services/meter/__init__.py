"""The per-second meter: charge each billing line for its allocations' seconds up to now.

A billing line (`billing.models.BillingLine`) is one job's allocations of one chip type and mode.

Rules:

- An allocation's mark only moves in whole seconds from `started_at`: billed up to `now`, it is
  billed through `min(now, ended_at)` truncated to a whole number of seconds since `started_at`. A
  fraction of a second at the end of an allocation is not billed.
- Cumulative-exact: what an allocation owes up to its mark is
  `cost_of_integral(chips x integral of price_per_hour over [started_at, mark))` (`kernel.money`: / 1 h,
  rounded once, half up), computed
  from scratch every time. A line owes what its ended allocations owed when they were folded in
  (`settled_owed`) plus what each open one owes now, and a tick charges the line
  `owed - charged_total`. However many ticks, each allocation's part is one rounding of its span.
- Open allocations are read, not written: a tick writes the lines (mark, charged total,
  chip-seconds), one Charge row per paid line, and the allocations that ended. Those are folded in
  once: their own `billed_through` and `charged_total` (what their time cost) become final, and
  are added to the line's settled totals, so later ticks no longer read them.
- One database transaction per batch: the line rows are locked, their allocations read after the
  lock, and the ledger transactions, the Charge rows, the lines and the folded-in allocations
  commit together or not at all. A retry, a second beat or a crashed worker's redelivery re-reads
  the lines and owes nothing more.
- One ledger transaction per wallet per batch (wallet -> revenue, key
  `meter:w{wallet}:{tick time in us}:l{first line}`) pays all of that wallet's lines; the tick's
  Charge rows name it. Batches keep a wallet's lines together, so a wallet is charged once a tick
  unless its lines hold more allocations than a batch does.
- A wallet never goes negative. When a wallet cannot cover what its lines owe, each is charged in
  id order while the balance lasts (the last one partly); the unpaid rest stays visible as
  `owed - charged_total` (which `manage.py reconcile` reports), the next tick asks for it again,
  and after the commit the shortfall is announced (`billing.signals.credit_shortfall`): the job is
  stopped at once by whoever acts on jobs. The stop margin makes this rare: the low-balance check
  (billing.services.holds) asks for a stop minutes before.
- Prices come from `billing.services.pricing.PriceBook`. A batch is read and priced as numpy columns
  (`billing.services.meter.columns`), to the micro-unit, exactly as `owed` prices one allocation.
"""

from __future__ import annotations

from billing.services.meter.cost import SECOND, billing_mark, owed
from billing.services.meter.post import MeterResult, Shortfall
from billing.services.meter.ticks import charge_allocation, charge_allocations, charge_lines, due_lines, run_meter

__all__ = [
    "SECOND",
    "MeterResult",
    "Shortfall",
    "billing_mark",
    "charge_allocation",
    "charge_allocations",
    "charge_lines",
    "due_lines",
    "owed",
    "run_meter",
]
