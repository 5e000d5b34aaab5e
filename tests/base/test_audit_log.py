"""Each operator action in the console leaves one audit entry (who, what, which row); the log can't be edited."""

from __future__ import annotations

from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.conf import settings
from django.utils import timezone

from base.models import AuditEntry
from billing.models import Transaction
from billing.services.credits import grant_trial_credit
from fleet.choices import AgentStatus
from fleet.models import ChipType, Job, Node, Pool
from market.models import Bid, BidStatus, MarketSettings
from portal.models import ApiToken
from workers.models import EnrollmentToken

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_background_work(monkeypatch):
    monkeypatch.setattr("workers.tasks.schedule_job.delay", lambda *args, **kwargs: None)
    monkeypatch.setattr("market.tasks.clear_market.delay", lambda *args, **kwargs: None)


@pytest.fixture
def console(client, operator, catalog):
    client.force_login(operator)
    return client


def only_entry(action: str) -> AuditEntry:
    entries = list(AuditEntry.objects.filter(action=action))
    assert len(entries) == 1, f"{action}: {entries}"
    return entries[0]


def assert_entry(action: str, actor, target) -> AuditEntry:
    entry = only_entry(action)
    assert (entry.actor, entry.actor_name) == (actor, actor.username)
    assert (entry.target_type, entry.target_id) == (target._meta.label_lower, str(target.pk))
    assert timezone.now() - entry.at < timedelta(minutes=1)
    return entry


def select(console, changelist: str, action: str, *rows):
    return console.post(changelist, {"action": action, "_selected_action": [row.pk for row in rows]})


def online_node(slug: str = "rtx-4090") -> Node:
    node = Node.objects.filter(pool__chip_type__slug=slug).order_by("pk").first()
    Node.objects.filter(pk=node.pk).update(agent_status=AgentStatus.ONLINE, last_heartbeat_at=timezone.now())
    node.refresh_from_db()
    return node


def test_a_new_price_is_recorded_with_the_price_it_replaces(console, operator):
    chip = ChipType.objects.get(slug="rtx-4090")
    effective = timezone.localtime(timezone=ZoneInfo(settings.DISPLAY_TIME_ZONE)) + timedelta(hours=1)
    console.post(
        "/admin/billing/price/add/",
        {
            "chip_type": chip.pk,
            "on_demand": "1.35",
            "spot_floor": "0.55",
            "effective_at_0": effective.strftime("%Y-%m-%d"),
            "effective_at_1": effective.strftime("%H:%M:%S"),
            "note": "spring prices",
        },
    )
    price = chip.prices.order_by("-effective_at", "-id").first()
    entry = assert_entry("price.add", operator, price)
    assert entry.details["before"] == {"on_demand": "1.20", "spot_floor": "0.50"}
    assert entry.details["after"] == {"on_demand": "1.35", "spot_floor": "0.55"}
    assert (entry.details["chip_type"], entry.details["note"]) == ("rtx-4090", "spring prices")


def test_a_credit_adjustment_is_recorded_once_with_its_reason_and_balances(console, operator, alice):
    form = {"amount": "5.50", "reason": "Compensation for an outage", "idempotency_key": "adjust:audit"}
    console.post(f"/admin/auth/user/{alice.pk}/adjust-credit/", form)
    console.post(f"/admin/auth/user/{alice.pk}/adjust-credit/", form)  # the same form again: one adjustment
    entry = assert_entry("credit.adjust", operator, alice)
    assert entry.details["reason"] == "Compensation for an outage"
    assert entry.details["amount"] == "5.50"
    assert entry.details["transaction"] == Transaction.objects.get(idempotency_key="adjust:audit").pk
    assert (entry.details["before"], entry.details["after"]) == ({"balance": "¥0.00"}, {"balance": "¥5.50"})


def test_a_reversal_is_recorded_against_the_transaction_it_reverses(console, operator, alice):
    txn = grant_trial_credit(alice)
    select(console, "/admin/billing/transaction/", "reverse_selected", txn)
    select(console, "/admin/billing/transaction/", "reverse_selected", txn)  # reversed once; recorded once
    entry = assert_entry("transaction.reverse", operator, txn)
    assert entry.details["reversal"] == Transaction.objects.get(reverses=txn).pk


def test_draining_and_returning_a_node_are_recorded_per_node(console, operator):
    node = online_node()
    select(console, "/admin/fleet/node/", "drain", node)
    select(console, "/admin/fleet/node/", "drain", node)  # already draining: nothing happens, nothing recorded
    entry = assert_entry("node.drain", operator, node)
    assert entry.details == {"before": {"agent_status": "online"}, "after": {"agent_status": "draining"}}
    select(console, "/admin/fleet/node/", "return_to_service", node)
    entry = assert_entry("node.return_to_service", operator, node)
    assert entry.details == {"before": {"agent_status": "draining"}, "after": {"agent_status": "online"}}


def test_reclaiming_a_node_for_maintenance_is_recorded_with_its_notice(console, operator):
    MarketSettings.objects.update_or_create(pk=1, defaults={"notice_seconds": 45})
    node = online_node()
    select(console, "/admin/fleet/node/", "reclaim_for_maintenance", node)
    entry = assert_entry("node.reclaim", operator, node)
    assert entry.details["notice_seconds"] == 45
    assert entry.details["jobs_moved"] == []
    assert entry.details["after"] == {"agent_status": "draining"}


def test_a_refused_reclaim_records_nothing(console):
    node = online_node()
    Node.objects.filter(pk=node.pk).update(agent_status=AgentStatus.LOST)
    select(console, "/admin/fleet/node/", "reclaim_for_maintenance", node)
    assert not AuditEntry.objects.exists()


def test_resetting_a_node_is_recorded(console, operator):
    node = online_node()
    select(console, "/admin/fleet/node/", "reset_node", node)
    entry = assert_entry("node.reset", operator, node)
    assert entry.details == {"before": {"agent_status": "online"}, "after": {"agent_status": "lost"}}


def test_creating_and_revoking_an_enrollment_token_are_recorded(console, operator):
    pool = Pool.objects.get(chip_type__slug="tpu-v5e")
    expires = timezone.localtime(timezone=ZoneInfo(settings.DISPLAY_TIME_ZONE)) + timedelta(days=1)
    console.post(
        "/admin/workers/enrollmenttoken/add/",
        {
            "pool": pool.pk,
            "name": "rack 7",
            "approved_chips": 4,
            "max_uses": 2,
            "expires_at_0": expires.strftime("%Y-%m-%d"),
            "expires_at_1": expires.strftime("%H:%M:%S"),
        },
    )
    token = EnrollmentToken.objects.get(name="rack 7")
    entry = assert_entry("enrollment_token.create", operator, token)
    assert (entry.details["approved_chips"], entry.details["max_uses"], entry.details["prefix"]) == (
        4,
        2,
        token.prefix,
    )
    assert "token_hash" not in entry.details
    select(console, "/admin/workers/enrollmenttoken/", "revoke_selected", token)
    select(console, "/admin/workers/enrollmenttoken/", "revoke_selected", token)  # already revoked
    assert_entry("enrollment_token.revoke", operator, token)


def test_revoking_an_api_token_is_recorded(console, operator, alice):
    token, _ = ApiToken.issue(alice, name="laptop")
    select(console, "/admin/portal/apitoken/", "revoke_selected", token)
    select(console, "/admin/portal/apitoken/", "revoke_selected", token)  # already revoked
    entry = assert_entry("api_token.revoke", operator, token)
    assert entry.details["user"] == str(alice)


def test_changing_the_operator_settings_records_each_changed_value(console, operator):
    console.post(
        "/admin/billing/operatorsettings/1/change/", {"trial_credit_amount": "12.5", "telemetry_retention_days": "90"}
    )
    entry = only_entry("operator_settings.change")
    assert (entry.actor, entry.target_type, entry.target_id) == (operator, "billing.operatorsettings", "1")
    assert entry.details == {"before": {"trial_credit_amount": "10"}, "after": {"trial_credit_amount": "12.5"}}


def test_changing_the_market_settings_is_recorded_and_an_unchanged_save_is_not(console, operator):
    settings = MarketSettings.load()
    console.post(f"/admin/market/marketsettings/{settings.pk}/change/", {"notice_seconds": "90"})
    console.post(f"/admin/market/marketsettings/{settings.pk}/change/", {"notice_seconds": "90"})
    entry = assert_entry("market_settings.change", operator, settings)
    assert entry.details == {"before": {"notice_seconds": 30}, "after": {"notice_seconds": 90}}


def test_making_a_user_staff_is_recorded_without_any_password(console, operator, alice):
    page = console.get(f"/admin/auth/user/{alice.pk}/change/")
    assert page.status_code == 200
    console.post(
        f"/admin/auth/user/{alice.pk}/change/",
        {
            "username": alice.username,
            "email": alice.email,
            "is_active": "on",
            "is_staff": "on",
            "date_joined_0": alice.date_joined.strftime("%Y-%m-%d"),
            "date_joined_1": alice.date_joined.strftime("%H:%M:%S"),
            "usable_password": "true",
        },
    )
    alice.refresh_from_db()
    assert alice.is_staff
    entry = assert_entry("user.change", operator, alice)
    assert entry.details["after"]["is_staff"] is True
    assert entry.details["before"]["is_staff"] is False
    assert "password" not in str(entry.details)


def test_cancelling_a_bid_is_recorded(console, operator, alice):
    job = Job.objects.create(
        owner=alice, model_name="llama-tiny", per_device_batch_size=4, max_steps=10, max_budget_per_hour=1
    )
    bid = Bid.objects.create(
        owner=alice,
        job=job,
        chip_type=ChipType.objects.get(slug="rtx-4090"),
        chips=2,
        max_price_per_hour=1_250_000,
        placed_at=timezone.now(),
    )
    select(console, "/admin/market/bid/", "cancel_selected", bid)
    assert Bid.objects.get(pk=bid.pk).status == BidStatus.CANCELLED
    entry = assert_entry("bid.cancel", operator, bid)
    assert entry.details["job"] == job.pk


def test_the_audit_log_is_readable_but_not_editable_or_deletable(console, operator):
    select(console, "/admin/fleet/node/", "drain", online_node())
    entry = only_entry("node.drain")
    listing = console.get("/admin/base/auditentry/")
    assert listing.status_code == 200
    assert "node.drain" in listing.content.decode()
    page = console.get(f"/admin/base/auditentry/{entry.pk}/change/")
    assert page.status_code == 200
    assert 'name="action"' not in page.content.decode()
    assert console.post(f"/admin/base/auditentry/{entry.pk}/change/", {"action": "nothing"}).status_code == 403
    assert console.post(f"/admin/base/auditentry/{entry.pk}/delete/", {"post": "yes"}).status_code == 403
    assert console.get("/admin/base/auditentry/add/").status_code == 403
    bulk = console.post("/admin/base/auditentry/", {"action": "delete_selected", "_selected_action": [entry.pk]})
    assert bulk.status_code in (200, 302)
    assert AuditEntry.objects.get(pk=entry.pk).action == "node.drain"


def test_an_entry_keeps_the_actors_name_after_the_account_is_deleted(client, catalog, django_user_model):
    staff = django_user_model.objects.create_superuser(username="night-shift", email="n@example.com", password="x")
    client.force_login(staff)
    select(client, "/admin/fleet/node/", "drain", online_node("tpu-v5e"))
    client.logout()
    staff.delete()
    entry = only_entry("node.drain")
    assert (entry.actor, entry.actor_name) == (None, "night-shift")
