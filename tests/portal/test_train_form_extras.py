"""The Train page beyond the plan: a spot bid left empty, the quote against the balance, and Re-run's form."""

from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from fleet.choices import JobStatus
from fleet.models import Job
from market.services.hints import default_bid
from tests.support.portal_pages import LAUNCH, quote_html

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_scheduling", "own_store")]


@pytest.fixture
def signed_in(client, make_user, fund):
    """Carol, with ¥49 in her wallet, on the site."""

    def as_user(balance: str = "49"):
        user = make_user("carol")
        fund(user, balance)
        client.force_login(user)
        return user

    return as_user


def test_a_spot_job_with_no_bid_gets_the_default_bid(client, signed_in, seeded_nodes_online):  # noqa: F811
    carol = signed_in()

    response = client.post(reverse("train"), {**LAUNCH, "spot": "on", "bid": ""})

    assert response.status_code == 302, response.content.decode()[:2000]
    job = Job.objects.get(owner=carol)
    assert job.spot and job.spot_bid_per_hour == default_bid() == 900_000


def test_the_quote_warns_when_the_estimate_is_far_above_the_balance(client, signed_in, seeded_nodes_online):  # noqa: F811
    signed_in("49")

    html = quote_html(client, max_steps="1000000")

    warning = html[html.index('data-testid="quote-credit"') :][:600]
    assert "above your balance of ¥49.00" in warning
    assert "stopped for credit" in warning


def test_the_quote_says_nothing_of_the_balance_when_it_covers_the_estimate(client, signed_in, seeded_nodes_online):  # noqa: F811
    signed_in("49")

    html = quote_html(client, max_steps="200")

    assert 'data-testid="quote"' in html and 'data-testid="quote-credit"' not in html


@pytest.fixture
def finished_job(make_user):
    def make(owner, **fields) -> Job:
        settings = {
            "name": "tuned",
            "model_name": "llama-tiny",
            "per_device_batch_size": 8,
            "max_steps": 321,
            "policy": "fastest",
            "max_budget_per_hour": 12_500_000,
            "total_budget": 40_000_000,
            "chip_counts": {"rtx-4090": 2},
            "spot": True,
            "spot_bid_per_hour": 1_100_000,
            "allow_on_demand": False,
            "seq_len": 48,
            "mode": "lora",
            "lora": {"r": 16, "alpha": 32, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]},
            "gradient_checkpointing": True,
            "eval_fraction": 0.1,
            "eval_every": 20,
            "status": JobStatus.SUCCEEDED,
        }
        return Job.objects.create(owner=owner, **{**settings, **fields})

    return make


def field_value(html: str, name: str) -> str:
    """The value attribute of the input named `name` (the selected option's value for a select)."""
    start = html.index(f'name="{name}"')
    tag = html[html.rindex("<", 0, start) : html.index(">", start)]
    if tag.startswith("<select"):
        options = html[start : html.index("</select>", start)]
        selected = options[: options.index(" selected")]
        return selected[selected.rindex('value="') + 7 :].split('"')[0]
    if 'value="' not in tag:
        return ""
    return tag[tag.index('value="') + 7 :].split('"')[0]


def test_the_job_pages_re_run_opens_the_form_with_that_jobs_settings(
    client, signed_in, finished_job, seeded_nodes_online
):  # noqa: F811
    carol = signed_in()
    job = finished_job(carol)

    page = client.get(reverse("job", args=[job.pk])).content.decode()
    rerun = f"{reverse('train')}?rerun={job.pk}"
    assert f'href="{rerun}"' in page

    form = client.get(rerun).content.decode()

    expected = {
        "model": "llama-tiny", "policy": "fastest", "max_budget": "12.50", "max_steps": "321",
        "per_device_batch_size": "8", "name": "tuned", "mode": "lora", "eval_every": "20", "bid": "1.10",
        "chips_rtx-4090": "2", "seq_len": "48", "total_budget": "40.00", "eval_fraction": "0.1",
        "gradient_checkpointing": "True",
    }  # fmt: skip
    assert {name: field_value(form, name) for name in expected} == expected
    assert json.loads(field_value(form, "lora").replace("&quot;", '"'))["r"] == 16
    assert re.search(r'<input[^>]*name="spot"[^>]*\bchecked', form)
    assert f"Settings of job {job.pk}" in form


def test_a_re_run_from_the_form_launches_the_same_job_again(client, signed_in, finished_job, seeded_nodes_online):  # noqa: F811
    carol = signed_in("100")
    job = finished_job(carol, spot=False, spot_bid_per_hour=None, chip_counts=None, total_budget=None)
    form = client.get(f"{reverse('train')}?rerun={job.pk}").content.decode()
    names = ["model", "dataset", "mode", "eval_every", "policy", "max_budget", "max_steps", "per_device_batch_size"]
    names += ["name", "seq_len", "lora", "gradient_checkpointing", "eval_fraction"]
    posted = {name: field_value(form, name).replace("&quot;", '"') for name in names}

    response = client.post(reverse("train"), {**posted, "allow_on_demand": "on", "allow_other_chips": "on"})

    assert response.status_code == 302, response.content.decode()[:3000]
    again = Job.objects.exclude(pk=job.pk).get(owner=carol)
    same = ["model_name", "policy", "max_budget_per_hour", "max_steps", "per_device_batch_size", "seq_len", "mode"]
    same += ["lora", "gradient_checkpointing", "eval_fraction", "eval_every", "name"]
    assert {name: getattr(again, name) for name in same} == {name: getattr(job, name) for name in same}


def test_someone_elses_job_fills_in_nothing(client, signed_in, finished_job, bob):
    signed_in()
    theirs = finished_job(bob)

    response = client.get(f"{reverse('train')}?rerun={theirs.pk}")

    assert response.status_code == 404
