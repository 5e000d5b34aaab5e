"""A job's life: every change of a job's status is made here, and nowhere else.

    queued ─claim─> planning ─place─> provisioning ─first step─> running ─every rank done─> succeeded
    planning ─no chips yet─> queued             planning ─can never be planned─> failed
    provisioning, running ─reclaim─> migrating ─resume─> queued (placed again with a new epoch)
    provisioning, running ─cancel or credit stop─> stopping ─ranks gone─> cancelled, stopped_no_credit
    migrating ─credit stop─> stopping
    queued, planning, migrating ─cancel─> cancelled          any live status ─crash, loss, timeout─> failed
    running (a run of islands) ─reclaim of some islands' chips─> running: those islands leave (`islands`)

Every arrow with the function that makes it and its callers: docs/ARCHITECTURE.md, section 3. The
transitions live by topic: how a job is queued, planned and placed (`starts`), how it stops and ends
(`ends`), how it moves to other chips (`moves`), and how islands of a run leave it in place (`islands`);
this package is their one address,
`lifecycle.<transition>`, for every caller.

Every transition locks the job's row, re-reads it and does nothing when it has already happened
(a retry, a second beat, a duplicate report), in one database transaction with what it implies:
events on the timeline, commands for the agents (the one STOP is built by `stop_ranks`), the
chips let go (workers.services.allocations, whose final charge ends billing), the bids closed,
the move's record kept (workers.services.migration).

A transition that puts a job back in the queue sends `job_queued` after its commit; the scheduler
(workers.receivers -> workers.services.scheduling) plans it. Should that message be lost, the
planning pass finds the queued job on its own.

Obligations: a new way for a job to end must go through `finish`
(it closes bids, ends allocations and abandons moves); a new way to stop ranks must use `stop_ranks`.
"""

from __future__ import annotations

from workers.services.lifecycle.ends import (
    NO_CREDIT,
    STOPPABLE,
    cancel,
    credit_stop_requested,
    end_without_node,
    fail,
    fence,
    finish,
    finish_after_crash,
    finish_overdue_stops,
    finish_when_ranks_done,
    operator_cancel_text,
    stop_for_credit,
    stop_ranks,
)
from workers.services.lifecycle.moves import MOVABLE, reclaim, resume
from workers.services.lifecycle.starts import (
    WAITING,
    claim_for_planning,
    job_queued,
    place,
    requeue_abandoned_planning,
    start_running,
    submit,
    wait_for_chips,
)

__all__ = [
    "MOVABLE",
    "NO_CREDIT",
    "STOPPABLE",
    "WAITING",
    "cancel",
    "claim_for_planning",
    "credit_stop_requested",
    "end_without_node",
    "fail",
    "fence",
    "finish",
    "finish_after_crash",
    "finish_overdue_stops",
    "finish_when_ranks_done",
    "job_queued",
    "operator_cancel_text",
    "place",
    "reclaim",
    "requeue_abandoned_planning",
    "resume",
    "start_running",
    "stop_for_credit",
    "stop_ranks",
    "submit",
    "wait_for_chips",
]
