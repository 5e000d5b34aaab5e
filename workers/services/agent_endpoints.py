"""What the three agent endpoints do, whichever server answers them.

The sync DRF views (workers/api/agent_views.py, on the main site) and the async agent service
(workers/agent_service/, its own process) both validate with workers/api/agent_serializers.py and
then call these, so an agent gets the same answer from either. Only how a poll waits and how its
heartbeat is written differ: the sync view BLPOPs and writes the heartbeat at once; the service
waits on its pub/sub hub and batches heartbeats (workers/services/heartbeats.py).
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.utils import timezone

from fleet.choices import CommandStatus
from fleet.models import Node
from kernel.protocol import STORAGE_GRANT_PREFIX
from workers.models import AgentCommand
from workers.services import storage_grants
from workers.services.enrollment import EnrollmentError, enroll_node
from workers.services.reports import ReportRejected, StaleEpoch, accept_report
from workers.services.restarts import move_jobs_of_vanished_ranks

# (node, health, ranks, seen_address) -> None: node_lifecycle.record_heartbeat, or a batch's `note`.
Heartbeat = Callable[[Node, dict, list, "str | None"], None]


def enroll(data: dict, seen_address: str) -> tuple[int, dict]:
    """(HTTP status, body) of an enrollment whose fields are valid."""
    try:
        enrolled = enroll_node(**data, seen_address=seen_address)
    except EnrollmentError as error:
        return 403, {"detail": str(error), "code": error.code}
    node = enrolled.node
    return 201, {
        "node_id": node.pk,
        "node_token": enrolled.token,
        "pool": node.pool.name,
        "chip_type": node.pool.chip_type.slug,
        "poll_timeout_s": settings.AGENT_POLL_WAIT_S,
        "heartbeat_deadline_s": settings.AGENT_HEARTBEAT_DEADLINE_S,
        "address": node.address,
        "address_source": "observed" if node.address_observed else "declared",
    }


def start_poll(node: Node, data: dict, *, ranks_sent: bool, seen_address: str | None, heartbeat: Heartbeat) -> list:
    """A poll's writes, then the commands pending for the node (the caller waits when there are none).

    Acks first: a node coming back from being lost is in service again once its kills are acked.
    `ranks_sent`: the agent listed its ranks (an empty list counts); ranks it acked starting and no
    longer lists died with an earlier agent, and their jobs move on.
    """
    record_acks(node, data["acks"], data["ack_errors"])
    if ranks_sent:
        move_jobs_of_vanished_ranks(node, data["ranks"])
    heartbeat(node, data["health"], data["ranks"], seen_address)
    return pending_commands(node.pk)


def pending_commands(node_id: int) -> list[dict]:
    """What the node has not acked yet, shaped as AgentCommand.as_message() shapes it, oldest first."""
    pending = AgentCommand.objects.filter(node_id=node_id, status=CommandStatus.PENDING).order_by("created_at", "pk")
    return list(pending.values("id", "type", "job_id", "epoch", "payload"))


def poll_answer(node: Node, commands: list[dict]) -> dict:
    return {"commands": commands, "server_time": timezone.now().timestamp(), "address": node.address}


def record_acks(node: Node, acks: list[dict], ack_errors: list[dict]) -> None:
    """Acked commands are done, or refused with the agent's reason; each is sent no more."""
    if not acks:
        return
    now = timezone.now()
    errors = {ack["id"]: ack["error"] for ack in ack_errors if ack["error"]}
    for ack in acks:
        error = ack["error"] or errors.get(ack["id"], "")
        outcome = CommandStatus.REFUSED if error else CommandStatus.DONE
        AgentCommand.objects.filter(node=node, pk=ack["id"], status=CommandStatus.PENDING).update(
            status=outcome, error=error, acked_at=now
        )


def grant_token(authorization: str) -> str | None:
    """The storage grant in an Authorization header ("Bearer svg_…"), or None."""
    parts = authorization.split()
    if len(parts) == 2 and parts[0].lower() == "bearer" and parts[1].startswith(STORAGE_GRANT_PREFIX):
        return parts[1]
    return None


NO_GRANT = {"detail": "Storage requests need the placement's storage grant (Bearer svg_…).", "code": "not_a_grant"}


def storage(token: str, data: dict) -> tuple[int, dict]:
    """(HTTP status, body) of a rank's valid request for storage URLs with its grant (storage_grants)."""
    try:
        if data["method"] in ("GET", "PUT"):
            return 200, storage_grants.sign(token, data["method"], data["keys"], data.get("sizes"))
        return 200, storage_grants.finish_upload(
            token, data["method"], data["key"], data["upload_id"], data.get("etags")
        )
    except storage_grants.GrantRefused as refused:
        return refused.status, refused.body()


def report(node: Node, data: dict) -> tuple[int, dict]:
    """(HTTP status, body) of a report whose items are valid: 409 for a stale epoch, 400 for a misfit."""
    try:
        accepted = accept_report(node, data["job_id"], data["epoch"], data["items"])
    except StaleEpoch as error:
        return 409, {"detail": str(error)}
    except ReportRejected as error:
        return 400, {"detail": str(error), "code": error.code}
    return 200, {"accepted": accepted}
