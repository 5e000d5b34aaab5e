"""The spot pages through Django's test client: bids, the price history, pricing, the launch page and the job page."""

from __future__ import annotations

import html as entities
import json
import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from billing.models import SpotPrice
from fleet.choices import JobStatus, MigrationReason, MigrationStatus
from fleet.models import ChipType, Job, Node
from market.models import Bid, BidStatus
from workers.models import JobMigration

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_background_work(monkeypatch):
    """Placing a bid clears the market and launching schedules the job, after commit; these tests never commit."""
    monkeypatch.setattr("workers.tasks.schedule_job.delay", lambda *args, **kwargs: None)
    monkeypatch.setattr("market.tasks.clear_market.delay", lambda *args, **kwargs: None)


@pytest.fixture
def alice_client(client, alice, fund, catalog):
    fund(alice)
    client.force_login(alice)
    return client


def make_job(owner, status=JobStatus.RUNNING, **fields) -> Job:
    """A spot job (only a spot job may bid)."""
    spec = {
        "model_name": "llama-tiny",
        "per_device_batch_size": 4,
        "max_steps": 100,
        "max_budget_per_hour": 28_000_000,
        "status": status,
        "spot": True,
        "spot_bid_per_hour": 900_000,
    }
    return Job.objects.create(owner=owner, **{**spec, **fields})


def make_bid(owner, job, chip="rtx-4090", chips=2, price=1_000_000, **fields) -> Bid:
    return Bid.objects.create(
        owner=owner,
        job=job,
        chip_type=ChipType.objects.get(slug=chip),
        chips=chips,
        max_price_per_hour=price,
        placed_at=timezone.now(),
        **fields,
    )


def place(client, job, **changes):
    data = {"job": job.pk, "chip": "rtx-4090", "chips": "2", "max_price": "0.80", **changes}
    return client.post(reverse("bids"), data)


def field_errors(html: str, label: str) -> list[str]:
    """The errors shown under a field, as the reader sees them ("Label: message")."""
    return [entities.unescape(m) for m in re.findall(rf'class="field-error"[^>]*>{re.escape(label)}: ([^<]+)<', html)]


# The bids page


def test_the_bids_page_needs_a_login(client):
    response = client.get(reverse("bids"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("account_login"))


def test_the_site_navigation_links_to_the_bids_page(alice_client):
    html = alice_client.get(reverse("dashboard")).content.decode()
    assert f'href="{reverse("bids")}"' in html


def test_the_bids_page_lists_your_bids_and_not_another_users(alice_client, alice, bob):
    mine = make_bid(alice, make_job(alice), won_chips=2, clearing_price=700_000)
    theirs = make_bid(bob, make_job(bob), chip="ascend-910b")
    html = alice_client.get(reverse("bids")).content.decode()
    row = html[html.index(f'data-bid="{mine.pk}"') :]
    row = row[: row.index("</tr>")]
    assert "NVIDIA RTX 4090" in row
    assert "¥1.00" in row  # max price
    assert "2 of 2" in row  # won chips
    assert "¥0.70" in row  # clearing price
    assert reverse("job", args=[mine.job_id]) in row
    assert f'data-bid="{theirs.pk}"' not in html


def test_placing_a_bid_from_the_page_lists_it_as_active(alice_client, alice):
    job = make_job(alice)
    response = place(alice_client, job)
    assert response.status_code == 302
    bid = Bid.objects.get(owner=alice)
    assert (bid.job, bid.chip_type.slug, bid.chips, bid.max_price_per_hour) == (job, "rtx-4090", 2, 800_000)
    html = alice_client.get(reverse("bids")).content.decode()
    assert f"Bid {bid.pk} placed" in html
    assert f'data-bid="{bid.pk}"' in html
    assert ">Active<" in html


def test_a_bid_below_the_floor_is_refused_on_the_price_and_nothing_is_saved(alice_client, alice):
    response = place(alice_client, make_job(alice), max_price="0.10")
    assert response.status_code == 200
    errors = field_errors(response.content.decode(), "Max price (¥ per chip-hour)")
    assert errors == ["0.10/h is below the rtx-4090 spot floor of 0.50/h."]
    assert not Bid.objects.exists()


def test_more_chips_than_exist_is_refused_on_the_chips_field(alice_client, alice):
    response = place(alice_client, make_job(alice), chips="500")
    errors = field_errors(response.content.decode(), "Chips")
    assert len(errors) == 1 and "500 chips asked" in errors[0]
    assert not Bid.objects.exists()


def test_an_unknown_chip_type_is_refused_on_the_chip_field(alice_client, alice):
    response = place(alice_client, make_job(alice), chip="quantum-9000")
    assert field_errors(response.content.decode(), "Chip") == ["Unknown chip type."]
    assert not Bid.objects.exists()


def test_a_bid_for_a_finished_job_is_refused_on_the_job_field(alice_client, alice):
    response = place(alice_client, make_job(alice, status=JobStatus.SUCCEEDED))
    assert field_errors(response.content.decode(), "Job") == ["Choose one of your spot jobs that hasn't finished."]
    assert not Bid.objects.exists()


def test_a_bid_for_another_users_job_is_refused_on_the_job_field(alice_client, bob):
    response = place(alice_client, make_job(bob))
    assert field_errors(response.content.decode(), "Job") == ["Choose one of your spot jobs that hasn't finished."]
    assert not Bid.objects.exists()


def test_a_bid_the_balance_cannot_hold_says_so_and_nothing_is_saved(alice_client, alice):
    response = place(alice_client, make_job(alice), chips="8", max_price="500")
    html = response.content.decode()
    assert re.search(r'role="alert"><p>Your balance of ¥100\.00 can&#x27;t hold this bid', html)
    assert not Bid.objects.exists()


def test_a_second_bid_for_the_same_job_and_chip_points_to_the_first(alice_client, alice):
    job = make_job(alice)
    make_bid(alice, job)
    response = place(alice_client, job)
    errors = field_errors(response.content.decode(), "Chip")
    assert errors == [f"Job {job.pk} already has an active bid for rtx-4090: raise or lower that one."]
    assert Bid.objects.count() == 1


def test_raising_a_bid_changes_its_price_and_keeps_its_time_priority(alice_client, alice):
    bid = make_bid(alice, make_job(alice), price=600_000)
    placed_at = bid.placed_at
    response = alice_client.post(reverse("bid_change", args=[bid.pk]), {"chips": "3", "max_price": "0.95"})
    assert response.status_code == 302
    bid.refresh_from_db()
    assert (bid.chips, bid.max_price_per_hour, bid.placed_at) == (3, 950_000, placed_at)
    html = alice_client.get(reverse("bids")).content.decode()
    assert f"Bid {bid.pk} raised: 3 chip(s) at up to ¥0.95 per chip-hour." in html


def test_lowering_a_bid_below_the_floor_is_refused_on_the_price_and_changes_nothing(alice_client, alice):
    bid = make_bid(alice, make_job(alice), price=600_000)
    response = alice_client.post(reverse("bid_change", args=[bid.pk]), {"chips": "2", "max_price": "0.20"})
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-testid="bid-errors"' in html
    assert field_errors(html, "Max price (¥ per chip-hour)") == ["0.20/h is below the rtx-4090 spot floor of 0.50/h."]
    bid.refresh_from_db()
    assert bid.max_price_per_hour == 600_000


def test_a_change_with_nothing_in_it_asks_for_a_price_or_chips(alice_client, alice):
    bid = make_bid(alice, make_job(alice))
    response = alice_client.post(reverse("bid_change", args=[bid.pk]), {"chips": "", "max_price": ""})
    assert "Give a new max price or number of chips." in response.content.decode()


def test_raising_a_cancelled_bid_is_refused_and_changes_nothing(alice_client, alice):
    bid = make_bid(alice, make_job(alice), status=BidStatus.CANCELLED)
    response = alice_client.post(reverse("bid_change", args=[bid.pk]), {"max_price": "2.00"}, follow=True)
    assert f"Bid {bid.pk} is cancelled; it can&#x27;t be changed." in response.content.decode()
    bid.refresh_from_db()
    assert bid.max_price_per_hour == 1_000_000


def test_cancelling_a_bid_marks_it_cancelled(alice_client, alice):
    bid = make_bid(alice, make_job(alice), won_chips=2)
    response = alice_client.post(reverse("bid_cancel", args=[bid.pk]), follow=True)
    assert f"Bid {bid.pk} cancelled." in response.content.decode()
    bid.refresh_from_db()
    assert (bid.status, bid.won_chips) == (BidStatus.CANCELLED, 0)


@pytest.mark.parametrize("action", ["bid_change", "bid_cancel"])
def test_another_users_bid_is_not_found_and_unchanged(alice_client, bob, action):
    bid = make_bid(bob, make_job(bob))
    response = alice_client.post(reverse(action, args=[bid.pk]), {"max_price": "5.00"})
    assert response.status_code == 404
    bid.refresh_from_db()
    assert (bid.status, bid.max_price_per_hour) == (BidStatus.ACTIVE, 1_000_000)


@pytest.mark.parametrize("action", ["bid_change", "bid_cancel"])
def test_changing_or_cancelling_needs_a_post(alice_client, alice, action):
    bid = make_bid(alice, make_job(alice))
    assert alice_client.get(reverse(action, args=[bid.pk])).status_code == 405


# Price history


def record_price(chip: str, at, price: int, floor: int = 500_000) -> SpotPrice:
    return SpotPrice.objects.create(
        chip_type=ChipType.objects.get(slug=chip),
        at=at,
        price_per_hour=price,
        floor_per_hour=floor,
        capacity=8,
        demand=4,
        allocated=4,
    )


def test_the_spot_history_gives_each_chip_type_its_clearings_oldest_first(client, catalog):
    now = timezone.now()
    record_price("rtx-4090", now - timedelta(hours=30), 600_000)  # in force when the 24 h window opens
    record_price("rtx-4090", now - timedelta(hours=1), 900_000)
    record_price("rtx-4090", now - timedelta(minutes=5), 700_000)
    record_price("ascend-910b", now - timedelta(minutes=2), 600_000, floor=600_000)
    body = json.loads(client.get(reverse("spot_history")).content)
    series = {row["chip"]: row for row in body["series"]}
    assert set(series) == {"rtx-4090", "ascend-910b"}
    assert [price for _, price in series["rtx-4090"]["points"]] == ["0.60", "0.90", "0.70"]
    assert series["rtx-4090"]["name"] == "NVIDIA RTX 4090"
    assert series["ascend-910b"]["floor"] == "0.60"


def test_the_spot_history_refuses_a_window_that_is_not_a_number(client, catalog):
    response = client.get(reverse("spot_history"), {"hours": "a day"})
    assert response.status_code == 400


def test_the_pricing_page_shows_the_clearing_price_beside_the_floor(client, catalog):
    record_price("rtx-4090", timezone.now() - timedelta(minutes=1), 900_000)
    html = client.get(reverse("pricing")).content.decode()
    row = html[html.index('data-chip="rtx-4090"') :]
    row = row[: row.index("</tr>")]
    assert re.search(r'data-testid="spot">¥0\.90<small[^>]*>cleared ¥0\.90</small>', row)
    assert re.search(r'data-testid="spot-floor">¥0\.50<', row)
    assert 'data-testid="on-demand">¥1.20<' in row
    assert f'data-spot-history="{reverse("spot_history")}"' in html


def test_the_pricing_page_says_spot_is_at_the_floor_before_any_bid(client, catalog):
    html = client.get(reverse("pricing")).content.decode()
    row = html[html.index('data-chip="mlu370"') :]
    assert re.search(r'data-testid="spot">¥0\.35<small[^>]*>no bids yet<', row[: row.index("</tr>")])


# The launch page

LAUNCH = {
    "model": "llama-tiny",
    "dataset": "synthetic",
    "policy": "cost-performance",
    "max_budget": "28",
    "max_steps": "200",
    "per_device_batch_size": "4",
}


def test_the_launch_page_offers_spot_with_a_bid_and_both_fallbacks(alice_client):
    html = alice_client.get(reverse("train")).content.decode()
    assert 'name="spot"' in html
    assert 'name="bid"' in html
    assert re.search(r'name="allow_on_demand"[^>]*checked', html)
    assert re.search(r'name="allow_other_chips"[^>]*checked', html)


def test_launching_a_spot_job_stores_its_bid_and_fallbacks(alice_client, alice, seeded_nodes_online):
    response = alice_client.post(reverse("train"), {**LAUNCH, "spot": "on", "bid": "0.90", "allow_other_chips": "on"})
    assert response.status_code == 302
    job = Job.objects.get(owner=alice)
    assert (job.spot, job.spot_bid_per_hour, job.allow_on_demand, job.allow_other_chips) == (
        True,
        900_000,
        False,
        True,
    )


def test_a_spot_job_without_a_bid_is_refused_on_the_bid_field_when_no_chip_type_takes_spot_bids(
    alice_client, alice, seeded_nodes_online
):
    """Else the bid left empty is the default bid (tests/portal/test_train_form_extras.py)."""
    Node.objects.update(spot_eligible=False)
    response = alice_client.post(reverse("train"), {**LAUNCH, "spot": "on", "bid": ""})
    assert field_errors(response.content.decode(), "Spot bid (¥ per chip-hour)") == [
        "A spot job needs a bid: the most it pays per chip-hour."
    ]
    assert not Job.objects.exists()


def test_an_on_demand_job_ignores_a_leftover_bid_and_keeps_the_default_fallbacks(
    alice_client, alice, seeded_nodes_online
):
    response = alice_client.post(reverse("train"), {**LAUNCH, "bid": "0.90"})
    assert response.status_code == 302
    job = Job.objects.get(owner=alice)
    assert (job.spot, job.spot_bid_per_hour, job.allow_on_demand, job.allow_other_chips) == (False, None, True, True)


def test_the_live_quote_follows_the_spot_box(alice_client, seeded_nodes_online):
    on_demand = alice_client.post(reverse("train_quote"), LAUNCH).content.decode()
    spot = alice_client.post(reverse("train_quote"), {**LAUNCH, "spot": "on", "bid": "5.00"}).content.decode()
    assert 'data-testid="quote-chips"' in on_demand and 'data-testid="quote-chips"' in spot
    assert 'data-mode="spot"' in spot
    assert 'data-mode="spot"' not in on_demand


# The job page


def test_the_job_page_shows_each_migration_with_its_refund(alice_client, alice):
    job = make_job(alice, spot=True, spot_bid_per_hour=900_000, allow_on_demand=False, step=60)
    notice = timezone.now() - timedelta(minutes=3)
    JobMigration.objects.create(
        job=job,
        reason=MigrationReason.OUTBID,
        detail="higher bids took 2 of its rtx-4090 chip(s)",
        status=MigrationStatus.RESUMED,
        from_epoch=1,
        to_epoch=2,
        nodes=["gpu-node-7"],
        notice_at=notice,
        notice_seconds=30,
        step_at_notice=42,
        checkpoint_step=42,
        checkpoint_at=notice + timedelta(seconds=2),
        resumed_at=notice + timedelta(seconds=8.5),
        resume_step=43,
        steps_lost=0,
        lost_seconds=0.0,
        refund=12_345,
    )
    html = alice_client.get(reverse("job", args=[job.pk])).content.decode()
    section = html[html.index('id="migrations"') :]
    assert "Outbid on the spot market" in section
    assert "higher bids took 2 of its rtx-4090 chip(s)" in section
    assert "<code>gpu-node-7</code>" in section
    assert "30 s notice, at step 42" in section
    assert "step 42" in section and "from step 43" in section
    assert re.search(r'data-testid="migration-downtime">8\.5 s<', section)
    assert re.search(r'data-testid="migration-steps-lost">0<', section)
    # To the cent on the page, every micro-unit on hover.
    assert re.search(r'data-testid="migration-refund"><span class="money" title="¥0\.012345">¥0\.01</span><', section)
    bid = r'<span class="money"[^>]*>¥0\.90</span>'
    assert re.search(rf"<strong>spot</strong>, bid {bid}/chip-h, spot only, may move to other chips", html)


def test_a_migrating_job_says_so_clearly(alice_client, alice):
    job = make_job(alice, status=JobStatus.MIGRATING)
    JobMigration.objects.create(
        job=job,
        reason=MigrationReason.MAINTENANCE,
        from_epoch=1,
        nodes=["gpu-node-7"],
        notice_at=timezone.now(),
        notice_seconds=30,
    )
    html = alice_client.get(reverse("job", args=[job.pk])).content.decode()
    assert 'data-testid="job-status">Migrating<' in html
    assert 'data-testid="migrating"' in html
    assert "saving…" in html  # the checkpoint isn't in yet
    live = alice_client.get(reverse("job_live", args=[job.pk])).content.decode()
    chips = live[live.index('id="job-chips" class="section" hx-swap-oob="true"') :]
    assert "Node reclaimed by the operator" in chips[: chips.index("</section>")]  # live with the chip mix


def test_a_job_without_migrations_has_no_migrations_section(alice_client, alice):
    html = alice_client.get(reverse("job", args=[make_job(alice).pk])).content.decode()
    assert "Migrations</h2>" not in html
    assert re.search(r'data-testid="cost"><span class="money" title="¥0\.00">¥0\.00</span><', html)
