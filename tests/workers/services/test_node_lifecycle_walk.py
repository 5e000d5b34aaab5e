"""Every arrow of a node's life, walked: each transition of the table in docs/ARCHITECTURE.md ("A node's
life") drives its workers.services.node_lifecycle function from its source status, and the node is found
in its target status. The table is read from the document, so the two can't drift apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from fleet.choices import AgentStatus
from fleet.models import Node, Pool
from tests.support.transition_tables import NEW, Transition, section, table_transitions
from workers.services import node_lifecycle

pytestmark = pytest.mark.django_db

NODE_LIFE = "### A node's life"
SILENT = settings.AGENT_HEARTBEAT_DEADLINE_S + 3600  # well past the deadline, and past any outage mark


@dataclass
class NodeWalk:
    enroll: Callable
    now: datetime

    def later(self, seconds: float) -> datetime:
        return self.now + timedelta(seconds=seconds)


def unenrolled(node_walk: NodeWalk) -> Node:
    return Node.objects.filter(agent_status=AgentStatus.UNENROLLED).first()  # a seeded one


def online(node_walk: NodeWalk) -> Node:
    node, _ = node_walk.enroll("walked")
    return node


def draining(node_walk: NodeWalk) -> Node:
    node = online(node_walk)
    assert node_lifecycle.drain(node.pk)
    return node


def lost(node_walk: NodeWalk) -> Node:
    node = online(node_walk)
    assert node_lifecycle.declare_lost_if_silent(node.pk, node_walk.later(SILENT))
    return node


def reset(node_walk: NodeWalk) -> Node:
    node = online(node_walk)
    assert node_lifecycle.reset_node(node.pk, by="the walk").after == AgentStatus.LOST
    return node


def on_the_locked_row(call: Callable, node: Node, node_walk: NodeWalk) -> None:
    """enroll and renew as enrollment.enroll_node calls them: on the locked row, saved with the enrollment."""
    node = Node.objects.select_for_update().get(pk=node.pk) if node.pk else node
    call(node, node_walk.now)
    node.save()


def for_maintenance(call: Callable, node: Node, node_walk: NodeWalk) -> None:
    call(node.pk, "the walk", 30, node_walk.now)


def long_silent(call: Callable, node: Node, node_walk: NodeWalk) -> None:
    call(node.pk, node_walk.later(SILENT))


def a_new_host(node_walk: NodeWalk) -> Node:
    return Node(hostname="new-host", pool=Pool.objects.get(chip_type__slug="rtx-4090"), chips=1)


Setup = Callable[[NodeWalk], Node]
Act = Callable[[Callable, Node, NodeWalk], object]  # (the named function, the node, the fleet)

WALK: dict[Transition, tuple[Setup, Act]] = {
    ("enroll", NEW, "online"): (a_new_host, on_the_locked_row),
    ("enroll", "unenrolled", "online"): (unenrolled, on_the_locked_row),
    ("enroll", "lost", "online"): (reset, on_the_locked_row),
    ("renew", "online", "online"): (online, on_the_locked_row),
    ("renew", "draining", "draining"): (draining, on_the_locked_row),
    ("renew", "lost", "lost"): (lost, on_the_locked_row),
    ("record_heartbeat", "lost", "online"): (lost, lambda call, node, walk: call(node, {}, [], now=walk.now)),
    ("drain", "online", "draining"): (online, lambda call, node, walk: call(node.pk)),
    ("return_to_service", "draining", "online"): (draining, lambda call, node, walk: call(node.pk)),
    ("reclaim_for_maintenance", "online", "draining"): (online, for_maintenance),
    ("reclaim_for_maintenance", "draining", "draining"): (draining, for_maintenance),
    ("declare_lost_if_silent", "online", "lost"): (online, long_silent),
    ("declare_lost_if_silent", "draining", "lost"): (draining, long_silent),
    ("reset_node", "online", "lost"): (online, lambda call, node, walk: call(node.pk, "the walk", walk.now)),
    ("reset_node", "draining", "lost"): (
        draining,
        lambda call, node, walk: call(node.pk, "the walk", walk.now),
    ),
}


@pytest.fixture
def node_walk(enroll) -> NodeWalk:
    return NodeWalk(enroll=enroll, now=timezone.now())


def _name(transition: Transition) -> str:
    function, source, target = transition
    return f"{function}:{source}->{target}"


@pytest.mark.parametrize("transition", sorted(WALK), ids=_name)
def test_each_documented_transition_takes_the_node_from_its_source_to_its_target(transition, node_walk):
    function, source, target = transition
    setup, act = WALK[transition]
    node = setup(node_walk)
    if node.pk:
        node.refresh_from_db()
    assert node.agent_status == (AgentStatus.UNENROLLED if source == NEW else source)
    with transaction.atomic():
        act(getattr(node_lifecycle, function), node, node_walk)
    assert Node.objects.get(hostname=node.hostname).agent_status == target


def test_the_walk_covers_exactly_the_documented_transitions():
    documented = table_transitions(section(NODE_LIFE))
    assert {"untested": sorted(documented - set(WALK)), "undocumented": sorted(set(WALK) - documented)} == {
        "untested": [],
        "undocumented": [],
    }
