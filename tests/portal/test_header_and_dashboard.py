"""The header every page shares (Billing in the navigation, the balance linking to it) and the dashboard's
call to action: "Train your first model" before any job, a smaller "New training run" after."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from billing.services.ledger import balance_of
from fleet.models import Job
from kernel.money import format_price

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice_client(client, alice, fund):
    fund(alice, "12.5")
    client.force_login(alice)
    return client


def header(html: str) -> str:
    return html[html.index('<header class="site-header">') : html.index("</header>")]


def test_the_header_links_to_billing_and_shows_the_balance_there(alice_client, alice):
    top = header(alice_client.get(reverse("pricing")).content.decode())
    assert re.search(rf'<a href="{reverse("billing")}"\s*>Billing</a>', top)
    balance = top[top.index('data-testid="header-balance"') :]
    assert format_price(balance_of(alice)) in balance[: balance.index("</a>")]
    assert f'<a class="nav-balance" href="{reverse("billing")}"' in top


def test_a_visitor_sees_no_balance_but_can_log_in_or_sign_up(client):
    top = header(client.get(reverse("pricing")).content.decode())
    assert "header-balance" not in top
    assert reverse("account_login") in top and reverse("account_signup") in top


def test_the_billing_pages_mark_billing_as_the_current_page(alice_client):
    for name in ("billing", "billing_usage", "billing_statements"):
        top = header(alice_client.get(reverse(name)).content.decode())
        assert f'href="{reverse("billing")}" aria-current="page">Billing' in top, name


def test_the_header_balance_costs_one_query_and_partials_none(alice_client):
    with CaptureQueriesContext(connection) as with_header:
        alice_client.get(reverse("pricing"))
    balance_queries = [q for q in with_header.captured_queries if "billing_account" in q["sql"]]
    assert len(balance_queries) == 1, balance_queries
    with CaptureQueriesContext(connection) as partial:
        alice_client.post(reverse("train_quote"), {"model": "llama-tiny"})
    assert not [q for q in partial.captured_queries if "billing_account" in q["sql"]]


def test_a_user_without_jobs_is_invited_to_train_a_first_model(alice_client):
    html = alice_client.get(reverse("dashboard")).content.decode()
    first_run = html[html.index('data-testid="first-run"') :]
    assert f'href="{reverse("train")}"' in first_run[: first_run.index("</section>")]
    assert "Train your first model" in first_run
    assert 'data-testid="new-run"' not in html


def test_a_user_with_a_job_gets_a_smaller_new_run_button(alice_client, alice):
    Job.objects.create(
        owner=alice, model_name="llama-tiny", per_device_batch_size=4, max_steps=10, max_budget_per_hour=28_000_000
    )
    html = alice_client.get(reverse("dashboard")).content.decode()
    assert 'data-testid="first-run"' not in html
    assert f'<a class="btn" href="{reverse("train")}" data-testid="new-run">New training run</a>' in html
