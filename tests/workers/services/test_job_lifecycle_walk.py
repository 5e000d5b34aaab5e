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
class JobWalk:
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


def queued(job_walk: JobWalk) -> Job:
    return lifecycle.submit(job_walk.owner, SPEC)


def planning(job_walk: JobWalk) -> Job:
    return lifecycle.claim_for_planning(queued(job_walk).pk, now=job_walk.now)


def provisioning(job_walk: JobWalk) -> Job:
    job = planning(job_walk)
    assert allocate(job, hand_plan((job_walk.node, 4)), now=job_walk.now)
    job.refresh_from_db()
    return job


def running(job_walk: JobWalk) -> Job:
    return job_walk.report(provisioning(job_walk), metric(1))


def running_at_its_last_step(job_walk: JobWalk) -> Job:
    return job_walk.report(running(job_walk), metric(LAST))


def migrating(job_walk: JobWalk) -> Job:
    job = running(job_walk)
    lifecycle.reclaim(
        job.pk, MigrationReason.MAINTENANCE, "walk", nodes=[job_walk.node], notice_seconds=30, now=job_walk.now
    )
    job.refresh_from_db()
    return job


def migrating_trained_to_the_end(job_walk: JobWalk) -> Job:
    """The notice reached the ranks after they trained the last step and saved the model."""
    job = migrating(job_walk)
    return job_walk.report(job, metric(LAST), checkpoint(job, LAST))


def stopping_for_a_cancel(job_walk: JobWalk) -> Job:
    return lifecycle.cancel(running(job_walk), now=job_walk.now)


def stopping_for_credit(job_walk: JobWalk, job: Job | None = None) -> Job:
    job = job or running(job_walk)
    assert lifecycle.stop_for_credit(job.pk, "Out of credit", now=job_walk.now)
    job.refresh_from_db()
    return job


def stopping_for_credit_at_its_last_step(job_walk: JobWalk) -> Job:
    return stopping_for_credit(job_walk, running_at_its_last_step(job_walk))


def locked(job: Job) -> Job:
    return Job.objects.select_for_update().get(pk=job.pk)


Setup = Callable[[JobWalk], Job] | None
# (lifecycle function, the job, the fleet) -> whatever it returns; the walk hands in the named function.
Act = Callable[[Callable, Job, JobWalk], object]
OVERDUE = settings.JOB_STOP_GRACE_S + 11  # finish_overdue_stops waits the stop grace and 10 s more

WALK: dict[Transition, tuple[Setup, Act]] = {
    ("submit", NEW, "queued"): (None, lambda call, job, walk: call(walk.owner, SPEC)),
    ("claim_for_planning", "queued", "planning"): (queued, lambda call, job, walk: call(job.pk, now=walk.now)),
    ("wait_for_chips", "planning", "queued"): (
        planning,
        lambda call, job, walk: call(job.pk, "No chips", walk.now),
    ),
    ("requeue_abandoned_planning", "planning", "queued"): (
        planning,
        lambda call, job, walk: call(walk.later(61)),
    ),
    ("place", "planning", "provisioning"): (
        planning,
        lambda call, job, walk: call(locked(job), hand_plan((walk.node, 4)), walk.now),
    ),
    ("fail", "planning", "failed"): (planning, lambda call, job, walk: call(locked(job), "No plan", walk.now)),
    ("cancel", "queued", "cancelled"): (queued, lambda call, job, walk: call(job, walk.now)),
    ("cancel", "planning", "cancelled"): (planning, lambda call, job, walk: call(job, walk.now)),
    ("cancel", "provisioning", "stopping"): (provisioning, lambda call, job, walk: call(job, walk.now)),
    ("cancel", "running", "stopping"): (running, lambda call, job, walk: call(job, walk.now)),
    ("cancel", "migrating", "cancelled"): (migrating, lambda call, job, walk: call(job, walk.now)),
    ("stop_for_credit", "provisioning", "stopping"): (
        provisioning,
        lambda call, job, walk: call(job.pk, "Out of credit", now=walk.now),
    ),
    ("stop_for_credit", "running", "stopping"): (
        running,
        lambda call, job, walk: call(job.pk, "Out of credit", now=walk.now),
    ),
    ("stop_for_credit", "migrating", "stopping"): (
        migrating,
        lambda call, job, walk: call(job.pk, "Out of credit", now=walk.now),
    ),
    ("start_running", "provisioning", "running"): (
        provisioning,
        lambda call, job, walk: call(locked(job), 1, walk.now),
    ),
    ("reclaim", "provisioning", "migrating"): (
        provisioning,
        lambda call, job, walk: call(
            job.pk, MigrationReason.MAINTENANCE, "walk", nodes=[walk.node], notice_seconds=30, now=walk.now
        ),
    ),
    ("reclaim", "running", "migrating"): (
        running,
        lambda call, job, walk: call(
            job.pk, MigrationReason.MAINTENANCE, "walk", nodes=[walk.node], notice_seconds=30, now=walk.now
        ),
    ),
    ("resume", "migrating", "queued"): (migrating, lambda call, job, walk: call(job.pk, now=walk.now)),
    ("resume", "migrating", "succeeded"): (
        migrating_trained_to_the_end,
        lambda call, job, walk: call(job.pk, now=walk.now),
    ),
    ("finish_when_ranks_done", "running", "succeeded"): (
        running_at_its_last_step,
        lambda call, job, walk: call(locked(job), walk.now),
    ),
    ("finish_when_ranks_done", "provisioning", "failed"): (
        provisioning,
        lambda call, job, walk: call(locked(job), walk.now),
    ),
    ("finish_when_ranks_done", "running", "failed"): (
        running,
        lambda call, job, walk: call(locked(job), walk.now),
    ),
    ("finish_when_ranks_done", "stopping", "succeeded"): (
        stopping_for_credit_at_its_last_step,
        lambda call, job, walk: call(locked(job), walk.now),
    ),
    ("finish_when_ranks_done", "stopping", "cancelled"): (
        stopping_for_a_cancel,
        lambda call, job, walk: call(locked(job), walk.now),
    ),
    ("finish_when_ranks_done", "stopping", "stopped_no_credit"): (
        stopping_for_credit,
        lambda call, job, walk: call(locked(job), walk.now),
    ),
    ("finish_after_crash", "stopping", "cancelled"): (
        stopping_for_a_cancel,
        lambda call, job, walk: call(locked(job), "Rank 0 exited with code 1", walk.now),
    ),
    ("finish_after_crash", "stopping", "stopped_no_credit"): (
        stopping_for_credit,
        lambda call, job, walk: call(locked(job), "Rank 0 exited with code 1", walk.now),
    ),
    ("finish_overdue_stops", "stopping", "cancelled"): (
        stopping_for_a_cancel,
        lambda call, job, walk: call(walk.later(OVERDUE)),
    ),
    ("finish_overdue_stops", "stopping", "stopped_no_credit"): (
        stopping_for_credit,
        lambda call, job, walk: call(walk.later(OVERDUE)),
    ),
    ("fail", "provisioning", "failed"): (
        provisioning,
        lambda call, job, walk: call(locked(job), "Crash", walk.now),
    ),
    ("fail", "running", "failed"): (running, lambda call, job, walk: call(locked(job), "Crash", walk.now)),
    ("end_without_node", "provisioning", "failed"): (
        provisioning,
        lambda call, job, walk: call(job.pk, "its node was lost", walk.now),
    ),
    ("end_without_node", "running", "failed"): (
        running_at_its_last_step,
        lambda call, job, walk: call(job.pk, "its node was lost", walk.now),
    ),
    ("end_without_node", "stopping", "cancelled"): (
        stopping_for_a_cancel,
        lambda call, job, walk: call(job.pk, "its node was lost", walk.now),
    ),
    ("end_without_node", "stopping", "stopped_no_credit"): (
        stopping_for_credit,
        lambda call, job, walk: call(job.pk, "its node was lost", walk.now),
    ),
}


@pytest.fixture
def job_walk(enroll, alice) -> JobWalk:
    node, _ = enroll("walked")
    return JobWalk(owner=alice, node=node, now=timezone.now())


def _name(transition: Transition) -> str:
    function, source, target = transition
    return f"{function}:{source}->{target}"


@pytest.mark.parametrize("transition", sorted(WALK), ids=_name)
def test_each_documented_transition_takes_the_job_from_its_source_to_its_target(transition, job_walk):
    function, source, target = transition
    setup, act = WALK[transition]
    job = setup(job_walk) if setup else None
    if job is not None:
        assert job.status == source, f"the walk's setup left the job {job.status}, not {source}"
    with transaction.atomic():
        returned = act(getattr(lifecycle, function), job, job_walk)
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
