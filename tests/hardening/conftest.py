"""Fixtures the market hardening tests share: follow-up tasks run inline, and alice holding a spot chip."""

from __future__ import annotations

import pytest

from fleet.choices import AllocationMode, JobStatus
from tests.hardening.spot_helpers import online_node, spot_job
from workers.services.scheduling import schedule


@pytest.fixture
def spot_tasks_inline(monkeypatch):
    """Celery's follow-up tasks (clear a market, schedule a job) run at once, in order."""
    from market.tasks import clear_market

    monkeypatch.setattr("market.tasks.clear_market.delay", lambda chip_type_id=None: clear_market(chip_type_id))
    monkeypatch.setattr("workers.tasks.schedule_job.delay", lambda job_id: schedule(job_id))


@pytest.fixture
def alices_running_job(catalog, alice, bob, fund):
    """Alice's spot job holds the one spot RTX 4090 at her bid of 0.80/h; both users have credit."""
    fund(alice, "100")
    fund(bob, "100")
    online_node("spot-4090", "rtx-4090")
    job = spot_job(alice, "0.80")
    job.refresh_from_db()
    assert job.status == JobStatus.PROVISIONING and job.allocations.get().mode == AllocationMode.SPOT
    return job
