"""Every arrow of a job's life, walked: each transition of the table in docs/ARCHITECTURE.md section 3
drives its lifecycle function from its source status, and the job is found in its target status.

The table is read from the document, so the walk and the table can't drift apart: a transition in one
and not the other fails `test_the_walk_covers_exactly_the_documented_transitions`, and the diagram above
the table is held to the same arrows. Each source state is reached through the lifecycle itself (and
the agents' reports where the platform learns a step), never by writing a status.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from fleet.choices import JobStatus, MigrationReason
from fleet.models import Job, Node
from kernel.spec import JobSpec
from tests.support.plans import hand_plan
from tests.support.transition_tables import NEW, Transition, diagram_transitions, section, table_transitions
from workers.services import lifecycle
from workers.services.placement import allocate
from workers.services.reports import accept_report

pytestmark = pytest.mark.django_db

JOB_LIFE = "## 3. A job's life"
LAST = 10
SPEC = JobSpec(model_name="llama-tiny", per_device_batch_size=4, max_steps=LAST, max_budget_per_hour=28_000_000)

# The walk --------------------------------------------------------------------------------------


@dataclass
class Fleet:
    """One enrolled node and alice's jobs on it, at a time the test controls."""

    owner: object
    node: Node
    now: datetime

    def later(self, seconds: float) -> datetime:
        return self.now + timedelta(seconds=seconds)

    def report(self, job: Job, *items: dict) -> Job:
        job.refresh_from_db()
        accept_report(self.node, job.pk, job.epoch, list(items), now=self.now)
        job.refresh_from_db()
        return job


def metric(step: int) -> dict:
    return {"kind": "metric", "rank": 0, "step": step, "loss": 3.0 - step / 10, "tokens_per_s": 100.0}


def checkpoint(job: Job, step: int) -> dict:
    path = f"store:checkpoints/job-{job.pk}/step-{step}"
    return {"kind": "checkpoint", "rank": 0, "step": step, "path": path, "seconds": 0.1, "stopping": False}


def queued(fleet: Fleet) -> Job:
    return lifecycle.submit(fleet.owner, SPEC)


def planning(fleet: Fleet) -> Job:
    return lifecycle.claim_for_planning(queued(fleet).pk, now=fleet.now)


def provisioning(fleet: Fleet) -> Job:
    job = planning(fleet)
    assert allocate(job, hand_plan((fleet.node, 4)), now=fleet.now)
    job.refresh_from_db()
    return job


def running(fleet: Fleet) -> Job:
    return fleet.report(provisioning(fleet), metric(1))


def running_at_its_last_step(fleet: Fleet) -> Job:
    return fleet.report(running(fleet), metric(LAST))


def migrating(fleet: Fleet) -> Job:
    job = running(fleet)
    lifecycle.reclaim(job.pk, MigrationReason.MAINTENANCE, "walk", nodes=[fleet.node], notice_seconds=30, now=fleet.now)
    job.refresh_from_db()
    return job


def migrating_trained_to_the_end(fleet: Fleet) -> Job:
    """The notice reached the ranks after they trained the last step and saved the model."""
    job = migrating(fleet)
    return fleet.report(job, metric(LAST), checkpoint(job, LAST))


def stopping_for_a_cancel(fleet: Fleet) -> Job:
    return lifecycle.cancel(running(fleet), now=fleet.now)


def stopping_for_credit(fleet: Fleet, job: Job | None = None) -> Job:
    job = job or running(fleet)
    assert lifecycle.stop_for_credit(job.pk, "Out of credit", now=fleet.now)
    job.refresh_from_db()
    return job


def stopping_for_credit_at_its_last_step(fleet: Fleet) -> Job:
    return stopping_for_credit(fleet, running_at_its_last_step(fleet))


def locked(job: Job) -> Job:
    return Job.objects.select_for_update().get(pk=job.pk)


Setup = Callable[[Fleet], Job] | None
# (lifecycle function, the job, the fleet) -> whatever it returns; the walk hands in the named function.
Act = Callable[[Callable, Job, Fleet], object]
OVERDUE = settings.JOB_STOP_GRACE_S + 11  # finish_overdue_stops waits the stop grace and 10 s more

WALK: dict[Transition, tuple[Setup, Act]] = {
    ("submit", NEW, "queued"): (None, lambda call, job, fleet: call(fleet.owner, SPEC)),
    ("claim_for_planning", "queued", "planning"): (queued, lambda call, job, fleet: call(job.pk, now=fleet.now)),
    ("wait_for_chips", "planning", "queued"): (planning, lambda call, job, fleet: call(job.pk, "No chips", fleet.now)),
    ("requeue_abandoned_planning", "planning", "queued"): (planning, lambda call, job, fleet: call(fleet.later(61))),
    ("place", "planning", "provisioning"): (
        planning,
        lambda call, job, fleet: call(locked(job), hand_plan((fleet.node, 4)), fleet.now),
    ),
    ("fail", "planning", "failed"): (planning, lambda call, job, fleet: call(locked(job), "No plan", fleet.now)),
    ("cancel", "queued", "cancelled"): (queued, lambda call, job, fleet: call(job, fleet.now)),
    ("cancel", "planning", "cancelled"): (planning, lambda call, job, fleet: call(job, fleet.now)),
    ("cancel", "provisioning", "stopping"): (provisioning, lambda call, job, fleet: call(job, fleet.now)),
    ("cancel", "running", "stopping"): (running, lambda call, job, fleet: call(job, fleet.now)),
    ("cancel", "migrating", "cancelled"): (migrating, lambda call, job, fleet: call(job, fleet.now)),
    ("stop_for_credit", "provisioning", "stopping"): (
        provisioning,
        lambda call, job, fleet: call(job.pk, "Out of credit", now=fleet.now),
    ),
    ("stop_for_credit", "running", "stopping"): (
        running,
        lambda call, job, fleet: call(job.pk, "Out of credit", now=fleet.now),
    ),
    ("stop_for_credit", "migrating", "stopping"): (
        migrating,
        lambda call, job, fleet: call(job.pk, "Out of credit", now=fleet.now),
    ),
    ("start_running", "provisioning", "running"): (
        provisioning,
        lambda call, job, fleet: call(locked(job), 1, fleet.now),
    ),
    ("reclaim", "provisioning", "migrating"): (
        provisioning,
        lambda call, job, fleet: call(
            job.pk, MigrationReason.MAINTENANCE, "walk", nodes=[fleet.node], notice_seconds=30, now=fleet.now
        ),
    ),
    ("reclaim", "running", "migrating"): (
        running,
        lambda call, job, fleet: call(
            job.pk, MigrationReason.MAINTENANCE, "walk", nodes=[fleet.node], notice_seconds=30, now=fleet.now
        ),
    ),
    ("resume", "migrating", "queued"): (migrating, lambda call, job, fleet: call(job.pk, now=fleet.now)),
    ("resume", "migrating", "succeeded"): (
        migrating_trained_to_the_end,
        lambda call, job, fleet: call(job.pk, now=fleet.now),
    ),
    ("finish_when_ranks_done", "running", "succeeded"): (
        running_at_its_last_step,
        lambda call, job, fleet: call(locked(job), fleet.now),
    ),
    ("finish_when_ranks_done", "provisioning", "failed"): (
        provisioning,
        lambda call, job, fleet: call(locked(job), fleet.now),
    ),
    ("finish_when_ranks_done", "running", "failed"): (running, lambda call, job, fleet: call(locked(job), fleet.now)),
    ("finish_when_ranks_done", "stopping", "succeeded"): (
        stopping_for_credit_at_its_last_step,
        lambda call, job, fleet: call(locked(job), fleet.now),
    ),
    ("finish_when_ranks_done", "stopping", "cancelled"): (
        stopping_for_a_cancel,
        lambda call, job, fleet: call(locked(job), fleet.now),
    ),
    ("finish_when_ranks_done", "stopping", "stopped_no_credit"): (
        stopping_for_credit,
        lambda call, job, fleet: call(locked(job), fleet.now),
    ),
    ("finish_after_crash", "stopping", "cancelled"): (
        stopping_for_a_cancel,
        lambda call, job, fleet: call(locked(job), "Rank 0 exited with code 1", fleet.now),
    ),
    ("finish_after_crash", "stopping", "stopped_no_credit"): (
        stopping_for_credit,
        lambda call, job, fleet: call(locked(job), "Rank 0 exited with code 1", fleet.now),
    ),
    ("finish_overdue_stops", "stopping", "cancelled"): (
        stopping_for_a_cancel,
        lambda call, job, fleet: call(fleet.later(OVERDUE)),
    ),
    ("finish_overdue_stops", "stopping", "stopped_no_credit"): (
        stopping_for_credit,
        lambda call, job, fleet: call(fleet.later(OVERDUE)),
    ),
    ("fail", "provisioning", "failed"): (provisioning, lambda call, job, fleet: call(locked(job), "Crash", fleet.now)),
    ("fail", "running", "failed"): (running, lambda call, job, fleet: call(locked(job), "Crash", fleet.now)),
    ("end_without_node", "provisioning", "failed"): (
        provisioning,
        lambda call, job, fleet: call(job.pk, "its node was lost", fleet.now),
    ),
    ("end_without_node", "running", "failed"): (
        running_at_its_last_step,
        lambda call, job, fleet: call(job.pk, "its node was lost", fleet.now),
    ),
    ("end_without_node", "stopping", "cancelled"): (
        stopping_for_a_cancel,
        lambda call, job, fleet: call(job.pk, "its node was lost", fleet.now),
    ),
    ("end_without_node", "stopping", "stopped_no_credit"): (
        stopping_for_credit,
        lambda call, job, fleet: call(job.pk, "its node was lost", fleet.now),
    ),
}


@pytest.fixture
def fleet(enroll, alice) -> Fleet:
    node, _ = enroll("walked")
    return Fleet(owner=alice, node=node, now=timezone.now())


def _name(transition: Transition) -> str:
    function, source, target = transition
    return f"{function}:{source}->{target}"


@pytest.mark.parametrize("transition", sorted(WALK), ids=_name)
def test_each_documented_transition_takes_the_job_from_its_source_to_its_target(transition, fleet):
    function, source, target = transition
    setup, act = WALK[transition]
    job = setup(fleet) if setup else None
    if job is not None:
        assert job.status == source, f"the walk's setup left the job {job.status}, not {source}"
    with transaction.atomic():
        returned = act(getattr(lifecycle, function), job, fleet)
    job = Job.objects.get(pk=job.pk) if job is not None else returned
    assert job.status == target, job.status_reason


def test_the_walk_covers_exactly_the_documented_transitions():
    documented = table_transitions(section(JOB_LIFE))
    assert {status for _, source, target in documented for status in (source, target)} == {NEW, *JobStatus.values}
    assert {"untested": sorted(documented - set(WALK)), "undocumented": sorted(set(WALK) - documented)} == {
        "untested": [],
        "undocumented": [],
    }


def test_the_diagram_and_the_table_name_the_same_transitions():
    documented, drawn = table_transitions(section(JOB_LIFE)), diagram_transitions(section(JOB_LIFE))
    assert {
        "only in the diagram": sorted(drawn - documented),
        "only in the table": sorted(documented - drawn),
    } == {"only in the diagram": [], "only in the table": []}
