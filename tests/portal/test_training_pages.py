"""The launch page through Django's test client: the form, its live quote, and launching."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from fleet.choices import AgentStatus, JobEventKind, JobStatus
from fleet.models import Allocation, Dataset, Job, Node
from tests.support.portal_pages import bring_online, launch, quote_html

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_scheduling", "own_store")]


# The launch page and its live quote


def test_the_launch_page_asks_for_a_login(client):
    response = client.get(reverse("train"))
    assert response.status_code == 302
    assert reverse("account_login") in response.url


def test_the_launch_page_renders_the_form_with_the_articles_defaults(alice_client, catalog):
    html = alice_client.get(reverse("train")).content.decode()
    assert f'hx-post="{reverse("train_quote")}"' in html
    assert 'hx-trigger="input changed delay:400ms, load"' in html
    assert '<option value="llama-tiny" selected>' in html
    assert 'name="max_budget" value="28"' in html
    assert 'name="chips_rtx-4090"' in html
    assert reverse("datasets") in html


def test_the_quote_shows_a_plan_for_llama_tiny(alice_client, seeded_nodes_online):
    html = quote_html(alice_client)
    assert 'data-testid="quote"' in html
    assert "ZeRO stage" in html
    assert "tokens/s" in html
    assert 'data-testid="quote-price">¥' in html
    assert 'data-testid="quote-total">¥' in html
    assert "simulated" in html


def test_the_quote_compares_the_mix_with_the_best_single_chip_type(alice_client, seeded_nodes_online):
    html = quote_html(alice_client)
    assert 'data-testid="quote-baseline"' in html
    assert "single chip type" in html


def test_the_quote_follows_chips_picked_by_hand(alice_client, seeded_nodes_online):
    html = quote_html(alice_client, **{"chips_ascend-910b": "2"})
    chips = html[html.index('data-testid="quote-chips"') :]
    assert "2 ×" in chips
    assert "Huawei Ascend 910B" in chips
    assert "NVIDIA RTX 4090" not in chips[: chips.index("</ul>")]


def test_the_quote_names_a_budget_that_is_too_low(alice_client, seeded_nodes_online):
    html = quote_html(alice_client, max_budget="0.01")
    assert 'data-testid="quote-problem"' in html
    assert "Budget too low" in html
    assert "¥0.01/h" in html


def test_the_quote_says_when_the_model_does_not_fit_the_free_chips(alice_client, catalog):
    bring_online("rtx-4090")
    html = quote_html(alice_client, model="llama-2-70b")
    assert "Model does not fit" in html
    assert "llama-2-70b" in html


def occupy_the_fleet(owner) -> None:
    """Every chip of the online fleet is held by another job: nothing is free, but chips exist."""
    busy = Job.objects.create(
        owner=owner, model_name="llama-tiny", per_device_batch_size=4, max_steps=10, max_budget_per_hour=1_000_000
    )
    now = timezone.now()
    for node in Node.objects.filter(agent_status=AgentStatus.ONLINE).select_related("pool"):
        Allocation.objects.create(
            job=busy,
            node=node,
            chip_type=node.pool.chip_type,
            chips=node.chips,
            epoch=1,
            started_at=now,
            billed_through=now,
        )


def test_the_quote_without_free_chips_says_the_job_can_still_queue(alice_client, bob, seeded_nodes_online):
    occupy_the_fleet(bob)
    html = quote_html(alice_client)
    assert "No free chips" in html
    assert "waits in the queue" in html


def test_the_quote_says_when_the_fleet_could_never_place_the_job(alice_client, catalog):
    html = quote_html(alice_client)  # no node is online
    assert "No capacity" in html and "could never be placed" in html
    assert "waits in the queue" not in html


def test_the_quote_names_the_field_of_invalid_input(alice_client, seeded_nodes_online):
    html = quote_html(alice_client, max_steps="0")
    assert "Check the form" in html
    assert "Max steps: Ensure this value is greater than or equal to 1." in html


# Launching


def test_training_queues_a_job_and_opens_its_page(alice_client, alice, seeded_nodes_online):
    response = launch(alice_client, name="first run")
    job = Job.objects.get(owner=alice)
    assert response.status_code == 302
    assert response.url == reverse("job", args=[job.pk])
    assert job.status == JobStatus.QUEUED
    assert (job.model_name, job.max_steps, job.per_device_batch_size) == ("llama-tiny", 200, 4)
    assert job.max_budget_per_hour == 28_000_000
    assert job.name == "first run"
    assert job.events.filter(kind=JobEventKind.QUEUED).exists()


def test_a_launch_the_balance_cannot_hold_is_refused_with_the_amounts(client, bob, seeded_nodes_online):
    client.force_login(bob)  # bob has no credit
    response = launch(client)
    assert response.status_code == 200
    assert "Your balance is ¥0.00" in response.content.decode()
    assert not Job.objects.filter(owner=bob).exists()


def test_chips_picked_by_hand_are_kept_on_the_job(alice_client, alice, seeded_nodes_online):
    launch(alice_client, **{"chips_rtx-4090": "2", "chips_tpu-v5e": ""})
    assert Job.objects.get(owner=alice).chip_counts == {"rtx-4090": 2}


def test_a_job_without_free_chips_is_still_queued(alice_client, alice, bob, seeded_nodes_online):
    occupy_the_fleet(bob)
    response = launch(alice_client)
    assert response.status_code == 302
    assert Job.objects.get(owner=alice).status == JobStatus.QUEUED


def test_zero_steps_is_refused_naming_the_field(alice_client, seeded_nodes_online):
    response = launch(alice_client, max_steps="0")
    assert response.status_code == 200
    assert "Max steps: Ensure this value is greater than or equal to 1." in response.content.decode()
    assert not Job.objects.exists()


def test_an_unknown_model_is_refused_naming_the_field(alice_client, seeded_nodes_online):
    html = launch(alice_client, model="gpt-9").content.decode()
    assert "Model: Unknown model &#x27;gpt-9&#x27;" in html
    assert not Job.objects.exists()


def test_someone_elses_dataset_is_refused(alice_client, bob, seeded_nodes_online):
    theirs = Dataset.objects.create(
        owner=bob,
        name="secret",
        kind="text",
        store_prefix=f"datasets/{bob.pk}/x",
        file_name="data.txt",
        size_bytes=1,
        samples=1,
    )
    html = launch(alice_client, dataset=theirs.reference).content.decode()
    assert "Dataset: Unknown dataset" in html
    assert not Job.objects.exists()


def test_a_budget_below_the_cheapest_plan_is_refused_on_the_budget_field(alice_client, seeded_nodes_online):
    html = launch(alice_client, max_budget="0.01").content.decode()
    assert "Hourly budget (¥): Budget too low" in html
    assert not Job.objects.exists()


def test_a_model_that_fits_no_chip_is_refused_on_the_model_field(alice_client, catalog):
    bring_online("rtx-4090")
    html = launch(alice_client, model="llama-2-70b").content.decode()
    assert "Model: Model does not fit" in html
    assert not Job.objects.exists()
