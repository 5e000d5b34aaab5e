"""Which bids are demand: a bid counts in the auction only for chips its job can actually run on.

A bid hangs off a job. Counted whatever its job was, a bid of an on-demand job, of a job whose
model fits no chip of that type, or of a job running on other chips won chips it never used and
evicted other users' spot jobs for free. So:

- only a live spot job bids: not finished, not stopping, no cancel asked;
- its constraints must allow the chip type: chips picked by hand name it (and cap the count), a
  job that may not change chip types has it in its current plan, and its model fits that chip's
  memory at some ZeRO stage (the planner's memory rule, on the model as planning sized it at launch:
  `Job.model_spec`, since uploads and Hub ids resolve only on the compute side);
- a placed job (provisioning, running) asks for no more than the spot chips of that type it holds:
  it does not grow onto new chips, it only keeps what it has;
- a job waiting to be placed (queued, planning, migrating) asks for up to its bid's chips; chips it
  wins must be taken up within the take-up time (see `market.services.clearing`), or the bid lapses.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from django.utils.translation import gettext as _

from fleet.choices import JobStatus
from fleet.models import ChipType, Job
from kernel import planner
from kernel.modelspecs import ModelSpec, UnknownModel, resolve_model

PLACED = {JobStatus.PROVISIONING, JobStatus.RUNNING}
WAITING = {JobStatus.QUEUED, JobStatus.PLANNING, JobStatus.MIGRATING}


@dataclass(frozen=True)
class Usable:
    """How many chips of a type a job could ever run on; when none, the field at fault and why."""

    limit: int
    field: str = ""
    reason: str = ""


def chip_limit(job: Job, chip_type: ChipType) -> Usable:
    """How many chips of this type the job could ever run on (0, with the reason, when none)."""
    if not job.spot:
        return Usable(0, "job", _("Job %(id)s is not a spot job; only spot jobs bid for spot chips.") % {"id": job.pk})
    if job.is_finished:
        finished = _("Job %(id)s has finished (%(status)s); bid for a live job.")
        return Usable(0, "job", finished % {"id": job.pk, "status": job.get_status_display().lower()})
    if job.cancel_requested_at or job.status == JobStatus.STOPPING:
        return Usable(0, "job", _("Job %(id)s is stopping; it will not use more chips.") % {"id": job.pk})
    slug = chip_type.slug
    limit = _hand_picked_limit(job, slug)
    if limit == 0:
        picked = ", ".join(f"{count}× {name}" for name, count in sorted(job.chip_counts.items()))
        only = _("Job %(id)s runs only on the chips picked for it (%(picked)s), not on %(chip)s.")
        return Usable(0, "chip", only % {"id": job.pk, "picked": picked, "chip": slug})
    kept = _kept_chip_types(job)
    if kept is not None and slug not in kept:
        types = ", ".join(sorted(kept))
        kept_only = _("Job %(id)s may not change chip types: it runs on %(types)s, not on %(chip)s.")
        return Usable(0, "chip", kept_only % {"id": job.pk, "types": types, "chip": slug})
    model = job_model(job)
    if model is None or not model_fits(model, float(chip_type.memory_gib), _largest_world(job)):
        return Usable(
            0,
            "chip",
            _("%(model)s fits a %(chip)s chip (%(memory)s GiB) at no ZeRO stage, so job %(id)s could never run on it.")
            % {"model": job.model_name, "chip": slug, "memory": chip_type.memory_gib, "id": job.pk},
        )
    return Usable(limit)


def demand_of(bid_chips: int, job: Job, chip_type: ChipType, held: int) -> int:
    """Chips a bid asks for in the auction: what its job can use now (`held`: its spot chips of this type)."""
    limit = chip_limit(job, chip_type).limit
    if limit == 0:
        return 0
    if job.status in PLACED:
        return min(bid_chips, held)
    if job.status in WAITING:
        return min(bid_chips, limit)
    return 0


def job_model(job: Job) -> ModelSpec | None:
    """The job's model as planning sized it at launch (an upload, a Hub model, LoRA's trainable share); for
    rows from before that was kept, a catalog name trained fully. None: a model the market can't size."""
    if job.model_spec:
        return ModelSpec.from_dict(job.model_spec)
    try:
        return resolve_model(job.model_name)
    except UnknownModel:
        return None


@functools.lru_cache(maxsize=512)
def model_fits(model: ModelSpec, memory_gib: float, ranks: int) -> bool:
    return planner.fits_chip(model, memory_gib, ranks)


def _hand_picked_limit(job: Job, slug: str) -> int:
    if not job.chip_counts:
        return planner.DEFAULT_MAX_RANKS
    return int(job.chip_counts.get(slug, 0))


def _kept_chip_types(job: Job) -> set[str] | None:
    """The chip types a job that may not change them is bound to (None: any)."""
    if job.allow_other_chips or not job.plan:
        return None
    return job.plan.chip_types()


def _largest_world(job: Job) -> int:
    """The most ranks the job may have: its hand-picked chips, else the planner's cap."""
    if job.chip_counts:
        return max(1, sum(int(count) for count in job.chip_counts.values()))
    return planner.DEFAULT_MAX_RANKS
