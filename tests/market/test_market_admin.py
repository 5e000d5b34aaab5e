"""The operator console for the spot market: bids, the price history, the notice period, and reclaiming nodes."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.messages import get_messages
from django.utils import timezone

from billing.models import SpotPrice
from fleet.choices import AgentStatus, JobStatus, MigrationReason
from fleet.models import Allocation, ChipType, Job, Node
from market.models import Bid, BidStatus, MarketSettings
from workers.models import AgentCommand, JobMigration

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_background_work(monkeypatch):
    monkeypatch.setattr("workers.tasks.schedule_job.delay", lambda *args, **kwargs: None)
    monkeypatch.setattr("market.tasks.clear_market.delay", lambda *args, **kwargs: None)


@pytest.fixture
def console(client, operator, catalog):
    client.force_login(operator)
    return client


def online(hostname: str) -> Node:
    Node.objects.filter(hostname=hostname).update(agent_status=AgentStatus.ONLINE, last_heartbeat_at=timezone.now())
    return Node.objects.get(hostname=hostname)


def running_job(owner, node: Node, chips: int = 4) -> Job:
    job = Job.objects.create(
        owner=owner,
        model_name="llama-tiny",
        per_device_batch_size=4,
        max_steps=100,
        max_budget_per_hour=28_000_000,
        status=JobStatus.RUNNING,
        epoch=1,
        step=12,
    )
    start = timezone.now() - timedelta(seconds=10)
    Allocation.objects.create(
        job=job,
        node=node,
        chip_type=node.pool.chip_type,
        chips=chips,
        epoch=1,
        started_at=start,
        billed_through=start,
    )
    return job


def act(console, action: str, *nodes: Node):
    return console.post(
        "/admin/fleet/node/",
        {"action": action, "_selected_action": [node.pk for node in nodes]},
        follow=True,
    )


def said(response) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


# Node actions


def test_reclaiming_a_node_for_maintenance_gives_its_running_jobs_notice_and_drains_it(console, alice, fund):
    fund(alice)
    MarketSettings.objects.update_or_create(pk=1, defaults={"notice_seconds": 45})
    node = online(Node.objects.filter(pool__chip_type__slug="rtx-4090").order_by("pk").first().hostname)
    job = running_job(alice, node)
    response = act(console, "reclaim_for_maintenance", node)
    assert response.status_code == 200
    node.refresh_from_db()
    job.refresh_from_db()
    assert node.agent_status == AgentStatus.DRAINING
    assert job.status == JobStatus.MIGRATING
    migration = JobMigration.objects.get(job=job)
    assert (migration.reason, migration.notice_seconds, migration.nodes) == (
        MigrationReason.MAINTENANCE,
        45,
        [node.hostname],
    )
    assert "going into maintenance" in migration.detail
    assert AgentCommand.objects.filter(node=node, job=job, type="stop").exists()
    assert not Allocation.objects.open().filter(job=job).exists()  # billing of its chips stopped at the notice
    assert said(response) == [
        f"Reclaimed {node.hostname} for maintenance: job {job.pk} has 45 s to checkpoint and move; "
        "nothing new is placed on it."
    ]


def test_reclaiming_a_lost_node_is_refused_with_a_clear_message_and_changes_nothing(console, alice, fund):
    fund(alice)
    nodes = Node.objects.filter(pool__chip_type__slug="ascend-910b").order_by("pk")
    good = online(nodes[0].hostname)
    lost = online(nodes[1].hostname)
    job = running_job(alice, good)
    Node.objects.filter(pk=lost.pk).update(agent_status=AgentStatus.LOST)
    response = act(console, "reclaim_for_maintenance", good, lost)
    messages = said(response)
    assert len(messages) == 1
    assert messages[0].startswith(f"Nothing was reclaimed: {lost.hostname} is lost.")
    good.refresh_from_db()
    job.refresh_from_db()
    assert good.agent_status == AgentStatus.ONLINE
    assert job.status == JobStatus.RUNNING
    assert not JobMigration.objects.exists()


def test_an_offline_node_is_neither_reclaimed_nor_drained(console):
    node = Node.objects.order_by("pk").first()
    Node.objects.filter(pk=node.pk).update(agent_status=AgentStatus.OFFLINE)
    for action, verb in [("reclaim_for_maintenance", "reclaimed"), ("drain", "drained")]:
        messages = said(act(console, action, node))
        assert messages[0].startswith(f"Nothing was {verb}: {node.hostname} is offline.")
    node.refresh_from_db()
    assert node.agent_status == AgentStatus.OFFLINE


def test_draining_a_node_lets_its_running_jobs_finish_and_places_nothing_new_on_it(console, alice, fund):
    from workers.services.capacity import schedulable_nodes

    fund(alice)
    node = online(Node.objects.order_by("pk").first().hostname)
    job = running_job(alice, node)
    response = act(console, "drain", node)
    assert said(response) == [
        f"Drained {node.hostname} (1 node): the jobs running there finish where they are; nothing new is placed there."
    ]
    node.refresh_from_db()
    job.refresh_from_db()
    assert node.agent_status == AgentStatus.DRAINING
    assert job.status == JobStatus.RUNNING
    assert Allocation.objects.open().filter(job=job).exists()
    assert node not in schedulable_nodes()


def test_a_drained_node_can_be_returned_to_service(console):
    node = online(Node.objects.order_by("pk").first().hostname)
    Node.objects.filter(pk=node.pk).update(agent_status=AgentStatus.DRAINING)
    act(console, "return_to_service", node)
    node.refresh_from_db()
    assert node.agent_status == AgentStatus.ONLINE


# Market models


def make_bid(owner, **fields) -> Bid:
    job = Job.objects.create(
        owner=owner, model_name="llama-tiny", per_device_batch_size=4, max_steps=10, max_budget_per_hour=1
    )
    return Bid.objects.create(
        owner=owner,
        job=job,
        chip_type=ChipType.objects.get(slug="rtx-4090"),
        chips=2,
        max_price_per_hour=1_250_000,
        placed_at=timezone.now(),
        **fields,
    )


def test_bids_are_listed_with_their_prices_in_currency_and_filter_by_status(console, alice):
    active = make_bid(alice, clearing_price=700_000)
    cancelled = make_bid(alice, status=BidStatus.CANCELLED)
    html = console.get("/admin/market/bid/", {"status__exact": "active"}).content.decode()
    assert "¥1.25" in html and "¥0.70" in html
    assert f"/admin/fleet/job/{active.job_id}/change/" in html
    assert f"/admin/fleet/job/{cancelled.job_id}/change/" not in html


def test_a_bid_is_read_only_in_the_console(console, alice):
    bid = make_bid(alice)
    html = console.get(f"/admin/market/bid/{bid.pk}/change/").content.decode()
    assert "¥1.25" in html
    assert 'name="max_price_per_hour"' not in html
    assert console.get("/admin/market/bid/add/").status_code == 403


def test_the_operator_can_cancel_a_bid(console, alice):
    bid = make_bid(alice)
    console.post("/admin/market/bid/", {"action": "cancel_selected", "_selected_action": [bid.pk]})
    bid.refresh_from_db()
    assert bid.status == BidStatus.CANCELLED


def test_the_spot_price_history_is_read_only(console):
    row = SpotPrice.objects.create(
        chip_type=ChipType.objects.get(slug="rtx-4090"),
        at=timezone.now(),
        price_per_hour=900_000,
        floor_per_hour=500_000,
        capacity=8,
        demand=10,
        allocated=8,
    )
    html = console.get("/admin/billing/spotprice/").content.decode()
    assert "¥0.90" in html and "¥0.50" in html
    assert console.get("/admin/billing/spotprice/add/").status_code == 403
    response = console.post(f"/admin/billing/spotprice/{row.pk}/change/", {"price_per_hour": 1})
    assert response.status_code == 403
    row.refresh_from_db()
    assert row.price_per_hour == 900_000


def test_the_operator_sets_the_notice_period_and_sees_where_floors_are_set(console):
    settings = MarketSettings.load()
    page = console.get(f"/admin/market/marketsettings/{settings.pk}/change/").content.decode()
    assert "Spot floors are the spot floor of each chip type's price row" in page
    assert "NVIDIA RTX 4090: ¥0.50 per chip-hour" in page
    assert "/admin/billing/price/add/" in page
    console.post(f"/admin/market/marketsettings/{settings.pk}/change/", {"notice_seconds": "90"})
    assert MarketSettings.load().notice_seconds == 90


def test_the_market_settings_list_opens_with_its_single_row(console):
    MarketSettings.objects.all().delete()
    assert console.get("/admin/market/marketsettings/").status_code == 200
    assert MarketSettings.objects.count() == 1
    assert console.get("/admin/market/marketsettings/add/").status_code == 403
