"""Nodes joining: enrollment with a token of the pool, renewal with the node token, and authentication.

A node's status changes only in workers.services.node_lifecycle: enrollment calls it for that.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from base.tokens import hash_token
from fleet.models import ChipType, Node
from kernel.stacks import CUDA, missing_runtime, stack_of_chip
from workers.models import EnrollmentToken, new_node_token
from workers.services import node_lifecycle


class EnrollmentError(Exception):
    """An enrollment that can't be accepted; the message says why, `code` names the case."""

    def __init__(self, message: str, code: str = "enrollment_refused") -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Enrolled:
    node: Node
    token: str


def enroll_node(
    *,
    hostname: str,
    chip_type: str,
    chips: int,
    simulated: bool,
    enrollment_token: str = "",
    node_token: str = "",
    spot_eligible: bool = False,
    address: str = "",
    seen_address: str = "",
    devices: list | None = None,
    agent_version: str = "",
    runtimes: list[str] | None = None,
    now: datetime | None = None,
) -> Enrolled:
    """Register a host, or re-register it, and return its new node token (the old one stops working).

    The node's address (where other nodes' ranks reach its ranks) is the one its agent declared, or,
    when it declared none, `seen_address`: where the platform sees its requests come from (then every
    poll keeps it current).

    A new hostname needs a usable enrollment token of its chip type's pool. An enrolled hostname is
    re-registered only by its own agent (presenting its current node token) or after the operator
    reset the node (no token left), so a pool's enrollment token can't take over another host.
    Declared chips never exceed what the operator approved (on the token, then on the node), and real
    chips need their stack's runtime among the `runtimes` the agent found on the host (an agent that
    lists none predates the list and ran CUDA only).
    """
    raw, now = new_node_token(), now or timezone.now()
    with transaction.atomic():
        # Locks the hostname's row, so two enrollments of one host can't both pass the checks below.
        existing = Node.objects.select_for_update().select_related("pool__chip_type").filter(hostname=hostname).first()
        if node_token:
            if existing is None or existing.token_hash != hash_token(node_token):
                raise EnrollmentError(
                    f"The node token presented is not host '{hostname}'s current node token.", "node_token_invalid"
                )
            node = _renew(existing, chip_type, chips, raw, now)
        else:
            node = _enroll_with_token(existing, enrollment_token, hostname, chip_type, chips, raw, now)
        if not simulated:
            _check_runtime(node.pool.chip_type, chips, [CUDA.name] if runtimes is None else runtimes)
        node.simulated, node.spot_eligible = simulated, spot_eligible
        node.address, node.address_observed = (address, False) if address else (seen_address, True)
        node.devices, node.agent_version = devices or [], agent_version
        node.save()
    return Enrolled(node=node, token=raw)


def _check_runtime(chip_type: ChipType, chips: int, runtimes: list[str]) -> None:
    """Real chips of a stack whose runtime the host lacks would fail at their first rank: refuse them now."""
    stack = stack_of_chip(chip_type.slug, chip_type.software_stack)
    problem = missing_runtime(stack, chips, chip_type.slug, runtimes)
    if problem:
        raise EnrollmentError(problem, "stack_runtime_missing")


def _renew(node: Node, chip_type: str, chips: int, raw: str, now: datetime) -> Node:
    """The agent of an enrolled host re-registers itself: same pool, chips within its approval."""
    if node.pool.chip_type.slug != chip_type:
        raise EnrollmentError(
            f"Host '{node.hostname}' is enrolled with {node.pool.chip_type.slug} chips, not {chip_type}.",
            "chip_type_mismatch",
        )
    _check_chips(chips, node.approved_chips, f"host '{node.hostname}'")
    node.chips, node.token_hash = chips, hash_token(raw)
    node_lifecycle.renew(node, now)
    return node


def _enroll_with_token(
    existing: Node | None, enrollment_token: str, hostname: str, chip_type: str, chips: int, raw: str, now: datetime
) -> Node:
    token = _usable_token(enrollment_token)
    pool = token.pool
    if pool.chip_type.slug != chip_type:
        raise EnrollmentError(
            f"This enrollment token is for pool {pool.name} ({pool.chip_type.slug}), not {chip_type}.",
            "chip_type_mismatch",
        )
    _check_chips(chips, token.approved_chips, "this enrollment token")
    if existing is not None:
        if existing.pool_id != pool.pk:
            raise EnrollmentError(f"Host '{hostname}' is already enrolled in pool {existing.pool.name}.", "host_taken")
        if existing.token_hash:
            raise EnrollmentError(
                f"Host '{hostname}' is already enrolled. Re-enrolling it needs its current node token "
                "(its agent presents it) or the operator's reset of the node (admin: Nodes › Reset node).",
                "host_already_enrolled",
            )
    EnrollmentToken.objects.filter(pk=token.pk).update(uses=F("uses") + 1)
    node = existing or Node(hostname=hostname, pool=pool)
    node.chips, node.approved_chips, node.token_hash = chips, token.approved_chips, hash_token(raw)
    node_lifecycle.enroll(node, now)
    return node


def _usable_token(raw: str) -> EnrollmentToken:
    """The enrollment token, locked (so its uses can't be over-spent by parallel enrollments), or why not."""
    if not raw:
        raise EnrollmentError(
            "An enrollment token (or this host's node token) is required.", "enrollment_token_missing"
        )
    token = (
        EnrollmentToken.objects.select_for_update(of=("self",))
        .select_related("pool__chip_type")
        .filter(token_hash=hash_token(raw))
        .first()
    )
    if token is None:
        raise EnrollmentError("Unknown enrollment token.", "enrollment_token_invalid")
    refusal = token.refusal()
    if refusal:
        raise EnrollmentError(refusal[1], refusal[0])
    return token


def _check_chips(declared: int, approved: int, whose: str) -> None:
    if declared > approved:
        raise EnrollmentError(
            f"The agent declared {declared} chip(s) but {whose} approves at most {approved} per node; "
            "ask the operator to approve more.",
            "chips_not_approved",
        )


def authenticate_node(raw: str) -> Node | None:
    return Node.objects.select_related("pool__chip_type").filter(token_hash=hash_token(raw)).first()
