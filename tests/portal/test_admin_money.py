"""The operator console shows money as ¥ amounts, marks the price in force, and keeps jobs read-only but cancellable."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.utils import timezone

from base.models import AuditEntry
from billing.admin import PriceAdmin
from billing.models import Price
from billing.services.credits import adjust_credit, grant_trial_credit
from fleet.choices import JobStatus
from fleet.models import ChipType, Job
from tests.support.money_html import money

pytestmark = pytest.mark.django_db


@pytest.fixture
def console(client, operator, catalog):
    client.force_login(operator)
    return client


def said(response) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


def make_job(owner, status=JobStatus.QUEUED) -> Job:
    return Job.objects.create(
        owner=owner,
        model_name="llama-tiny",
        per_device_batch_size=4,
        max_steps=100,
        max_budget_per_hour=28_500_000,
        total_budget=9_880_288,
        credit_hold=2_375_000,
        status=status,
    )


# Money as ¥ amounts


def test_balances_and_payments_show_as_yuan_to_the_cent_with_the_exact_amount_on_hover(console, alice):
    adjust_credit(alice, 9_880_288, reason="odd amount", actor=None, key="odd")
    users = console.get("/admin/auth/user/").content.decode()
    accounts = console.get("/admin/billing/account/").content.decode()
    assert money("¥9.88", "¥9.880288") in users and money("¥9.88", "¥9.880288") in accounts
    account = alice.accounts.get()
    detail = console.get(f"/admin/billing/account/{account.pk}/change/").content.decode()
    assert money("¥9.88", "¥9.880288") in detail and "9880288" not in detail


def test_a_job_page_shows_its_budgets_as_yuan_not_micro_units(console, alice):
    job = make_job(alice)
    page = console.get(f"/admin/fleet/job/{job.pk}/change/").content.decode()
    assert "¥28.50/h" in page and money("¥9.88", "¥9.880288") in page and money("¥2.38", "¥2.375") in page
    assert "28500000" not in page and "9880288" not in page and "2375000" not in page


def test_money_inputs_say_they_take_yuan(console, alice):
    price_form = console.get("/admin/billing/price/add/").content.decode()
    adjust_form = console.get(f"/admin/auth/user/{alice.pk}/adjust-credit/").content.decode()
    assert "In ¥ (yuan), e.g. 1.35" in price_form
    assert "In ¥ (yuan), e.g. 5.50" in adjust_form


def test_a_credit_adjustment_says_what_it_did(console, alice):
    grant_trial_credit(alice)
    response = console.post(
        f"/admin/auth/user/{alice.pk}/adjust-credit/",
        {"amount": "-2.5", "reason": "clawback", "idempotency_key": "adjust:said"},
    )
    [message] = said(response)
    assert message.startswith("Debited ¥2.50 from alice's wallet; the balance is now ¥7.50 (transaction #")


# The price in force


def test_the_price_list_marks_the_price_in_force_now(console):
    chip = ChipType.objects.get(slug="rtx-4090")
    launch = chip.prices.get()  # seeded effective now
    now = timezone.now()  # after the launch price: the newer price takes over from it
    newer = Price.objects.create(
        chip_type=chip, on_demand_per_hour=1_300_000, spot_floor_per_hour=500_000, effective_at=now
    )
    later = Price.objects.create(
        chip_type=chip, on_demand_per_hour=1_400_000, spot_floor_per_hour=500_000, effective_at=now + timedelta(hours=1)
    )
    response = console.get("/admin/billing/price/", {"chip_type__id__exact": chip.pk})
    shown = {price.pk: PriceAdmin.in_force(None, price) for price in response.context["cl"].result_list}
    assert shown == {later.pk: "", newer.pk: "✓", launch.pk: ""}
    page = response.content.decode()
    assert "In force" in page and "✓" in page and "¥1.30" in page
    # Every other chip type's launch price is in force: one ✓ per chip type on the unfiltered list.
    everything = console.get("/admin/billing/price/").context["cl"].result_list
    assert sum(PriceAdmin.in_force(None, price) == "✓" for price in everything) == ChipType.objects.count()


def test_a_jobs_plan_reads_as_chips_speed_and_yuan_not_a_raw_repr_in_micro_units(console, alice):
    job = make_job(alice, JobStatus.RUNNING)
    plan = {
        "policy": "cost-performance",
        "model": "llama-tiny",
        "ranks": [
            {"chip": "rtx-4090", "node_id": 1, "hostname": "gpu-host-1", "micro_batch": 3, "mode": "on_demand",
             "tokens_per_s": 40_000.0, "simulated": True},
        ],
        "zero_stage": 1,
        "tokens_per_s": 40_000.0,
        "price_per_hour": 4_000_000,
        "price_per_million_tokens": 27_778,
        "eta_seconds": 90.0,
        "total_cost": 100_000,
    }  # fmt: skip
    Job.objects.filter(pk=job.pk).update(plan=plan, quote=plan)

    page = console.get(f"/admin/fleet/job/{job.pk}/change/").content.decode()

    assert "40,000 tokens/s · ¥4.00/h" in page and money("¥0.10") in page
    assert "rank 0: rtx-4090 on gpu-host-1, micro-batch 3, on-demand (simulated)" in page
    assert "Quoted at launch" in page
    assert "Plan(" not in page and "price_per_hour" not in page and "4000000" not in page


# Jobs: read-only, cancellable


def test_a_job_page_is_read_only_without_save_or_delete(console, alice):
    job = make_job(alice)
    page = console.get(f"/admin/fleet/job/{job.pk}/change/").content.decode()
    assert 'name="_save"' not in page and 'name="_continue"' not in page and "deletelink" not in page
    assert 'data-testid="cancel-job"' in page
    assert console.post(f"/admin/fleet/job/{job.pk}/change/", {"status": "succeeded"}).status_code == 403
    assert console.post(f"/admin/fleet/job/{job.pk}/delete/", {"post": "yes"}).status_code == 403
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED


def test_cancel_selected_jobs_first_asks_why_then_cancels_them_through_the_lifecycle_and_audits_it(
    console, operator, alice
):
    waiting, finished = make_job(alice), make_job(alice, JobStatus.SUCCEEDED)
    selected = {"action": "cancel_selected", "_selected_action": [waiting.pk, finished.pk]}

    asked = console.post("/admin/fleet/job/", selected)

    assert asked.status_code == 200 and 'data-testid="confirm-cancel"' in asked.content.decode()
    assert "Cancel 1 job" in asked.content.decode() and "already ended: left as it is" in asked.content.decode()
    waiting.refresh_from_db()
    assert waiting.status == JobStatus.QUEUED and not AuditEntry.objects.filter(action="job.cancel").exists()

    response = console.post("/admin/fleet/job/", {**selected, "reason": "Abusive workload"})

    assert response.status_code == 302
    waiting.refresh_from_db()
    finished.refresh_from_db()
    assert waiting.status == JobStatus.CANCELLED and waiting.cancel_requested_at is not None
    assert waiting.status_reason == "Cancelled by the operator: Abusive workload"
    assert finished.status == JobStatus.SUCCEEDED
    entry = AuditEntry.objects.get(action="job.cancel")
    assert (entry.actor, entry.target_id) == (operator, str(waiting.pk))
    assert entry.details["before"] == {"status": "queued"} and entry.details["after"] == {"status": "cancelled"}
    assert entry.details["reason"] == "Abusive workload"
    assert said(response) == [
        f"Cancelled job {waiting.pk} of alice: it was not running on chips, so it ended at once. "
        "The owner is told why on the job page and by e-mail.",
        f"Job {finished.pk} had already ended (succeeded): nothing to cancel.",
    ]


@pytest.mark.parametrize("reason", ["", "   "])
def test_the_operators_cancel_without_a_reason_is_refused_and_cancels_nothing(console, alice, reason):
    job = make_job(alice, JobStatus.RUNNING)

    from_page = console.post(f"/admin/fleet/job/{job.pk}/cancel/", {"reason": reason})
    from_list = console.post(
        "/admin/fleet/job/", {"action": "cancel_selected", "_selected_action": [job.pk], "reason": reason}
    )

    assert from_page.status_code == from_list.status_code == 400
    assert "This field is required." in from_page.content.decode()
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.cancel_requested_at is None
    assert not AuditEntry.objects.filter(action="job.cancel").exists()


def test_the_cancel_button_asks_why_then_tells_a_running_jobs_ranks_to_stop(console, operator, alice):
    job = make_job(alice, JobStatus.RUNNING)
    page = console.get(f"/admin/fleet/job/{job.pk}/change/").content.decode()
    assert f'href="/admin/fleet/job/{job.pk}/cancel/"' in page

    asked = console.get(f"/admin/fleet/job/{job.pk}/cancel/")

    assert asked.status_code == 200 and 'name="reason"' in asked.content.decode()
    job.refresh_from_db()
    assert job.cancel_requested_at is None

    response = console.post(f"/admin/fleet/job/{job.pk}/cancel/", {"reason": "Node maintenance"})

    assert response.status_code == 302 and response["Location"] == f"/admin/fleet/job/{job.pk}/change/"
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPING and job.cancel_requested_at is not None
    assert job.status_reason == "Cancelled by the operator: Node maintenance"
    assert AuditEntry.objects.filter(action="job.cancel", target_id=str(job.pk), actor=operator).count() == 1
    page = console.get(f"/admin/fleet/job/{job.pk}/change/").content.decode()
    assert 'data-testid="cancel-job"' not in page  # already being cancelled


def test_the_owner_sees_the_operators_reason_on_the_job_page(console, client, alice):
    job = make_job(alice, JobStatus.RUNNING)
    console.post(f"/admin/fleet/job/{job.pk}/cancel/", {"reason": "Node maintenance"})
    client.force_login(alice)

    page = client.get(f"/jobs/{job.pk}/").content.decode()

    assert "Cancelled by the operator: Node maintenance" in page


def test_staff_without_the_job_permission_cannot_cancel(client, django_user_model, catalog, alice):
    staff = django_user_model.objects.create_user(username="viewer", password="x", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_job"))
    client.force_login(staff)
    job = make_job(alice)
    assert client.post(f"/admin/fleet/job/{job.pk}/cancel/").status_code == 403
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED and not AuditEntry.objects.filter(action="job.cancel").exists()
