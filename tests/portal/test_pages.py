"""The web pages, through Django's test client: pricing, dashboard and API tokens."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape
from io import StringIO
from zoneinfo import ZoneInfo

import pytest
from django.core.management import call_command
from django.db.models import Sum
from django.urls import reverse
from django.utils import timezone

from base.tokens import hash_token
from billing.services.credits import adjust_credit, grant_trial_credit
from billing.services.pricing import current_offers, reference_chip
from fleet.choices import AgentStatus
from fleet.models import ChipType, Node
from kernel.money import format_money
from portal.models.tokens import ApiToken, TokenScope
from tests.support.money_html import money

pytestmark = pytest.mark.django_db

NEW_TOKEN = re.compile(r'data-testid="new-token"[^>]*>([^<]+)<')


@pytest.fixture
def catalog():
    call_command("seed_catalog", stdout=StringIO())


@pytest.fixture
def unverified_alice(django_user_model):
    return django_user_model.objects.create_user("alice", "alice@example.com", "pw-alice-123")


@pytest.fixture
def unverified_bob(django_user_model):
    return django_user_model.objects.create_user("bob", "bob@example.com", "pw-bob-123")


@pytest.fixture
def alice_client(client, unverified_alice):
    client.force_login(unverified_alice)
    return client


def row_of(html: str, slug: str) -> str:
    start = html.index(f'data-chip="{slug}"')
    return html[start : html.index("</tr>", start)]


def test_the_home_page_links_to_pricing_and_sign_up(client):
    html = client.get(reverse("home")).content.decode()
    assert reverse("pricing") in html
    assert reverse("account_signup") in html


def test_a_visitor_sees_each_chips_prices_and_how_many_are_online_on_the_home_page(client, catalog):
    Node.objects.filter(pool__chip_type__slug="rtx-4090").update(
        agent_status=AgentStatus.ONLINE, last_heartbeat_at=timezone.now()
    )
    online = Node.objects.filter(pool__chip_type__slug="rtx-4090").aggregate(chips=Sum("chips"))["chips"]

    html = client.get(reverse("home")).content.decode()

    rtx = row_of(html.replace("</li>", "</tr>"), "rtx-4090")
    assert "¥1.20" in rtx and "on-demand" in rtx and "spot now" in rtx
    assert f"{online} online" in rtx
    assert "none online" in row_of(html.replace("</li>", "</tr>"), "tpu-v5e")
    assert f"{online} chips online" in html


def test_a_visitor_reads_how_it_works_on_the_home_page(client):
    html = client.get(reverse("home")).content.decode()
    steps = html[html.index('data-testid="how-it-works"') :]
    assert "How it works" in html
    assert "Sign up" in steps and "quote" in steps and "Download the model" in steps


@pytest.mark.parametrize("path", ["/", "/pricing/", "/accounts/login/", "/no/such/page/"])
def test_every_page_starts_with_a_link_that_skips_to_the_content(client, path):
    html = client.get(path).content.decode()
    body = html[html.index("<body") :]
    first_link = re.search(r"<(a|button|summary)\b[^>]*>", body).group(0)
    assert 'href="#main"' in first_link and "Skip to content" in body[: body.index("</a>")]
    assert '<main class="container" id="main"' in html


def test_pricing_is_public_and_lists_every_chip(client, catalog):
    response = client.get(reverse("pricing"))
    assert response.status_code == 200
    html = response.content.decode()
    for chip in ChipType.objects.all():
        assert f'data-chip="{chip.slug}"' in html
        assert chip.name in html


def test_pricing_shows_the_price_of_a_work_unit(client, catalog):
    offers = current_offers()
    tpu = next(offer for offer in offers if offer.chip.slug == "tpu-v5e")
    per_unit = tpu.per_work_unit(tpu.on_demand_per_hour, reference_chip(offers))
    row = row_of(client.get(reverse("pricing")).content.decode(), "tpu-v5e")
    assert "¥2.80" in row
    assert format_money(per_unit) in row  # worked out to the micro-unit, shown to the cent
    # The v5e delivers more than a 4090, so a 4090-hour of its compute costs less than its chip-hour.
    assert per_unit < tpu.on_demand_per_hour


def test_pricing_counts_only_chips_online_and_names_declared_ones_offline(client, catalog):
    row = row_of(client.get(reverse("pricing")).content.decode(), "tpu-v5e")
    assert "none online" in row and "8 declared, offline" in row  # seeded pools, no agent enrolled


@pytest.mark.parametrize("name", ["dashboard", "tokens"])
def test_signed_in_pages_need_a_login(client, name):
    response = client.get(reverse(name))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("account_login"))


def test_the_dashboard_shows_the_balance_and_the_ledger(alice_client, unverified_alice):
    grant_trial_credit(unverified_alice)
    html = alice_client.get(reverse("dashboard")).content.decode()
    assert f'data-testid="balance">{money("¥10.00")}<' in html
    assert "trial credit" in html
    assert money("+¥10.00") in html


def test_the_ledger_history_pages_by_25(alice_client, unverified_alice):
    for n in range(30):
        adjust_credit(unverified_alice, 1_000_000, reason=f"goodwill {n}", actor=None, key=f"test-adjust-{n}")
    first = alice_client.get(reverse("dashboard")).content.decode()
    second = alice_client.get(reverse("dashboard"), {"page": 2}).content.decode()
    assert first.count("goodwill ") == 25
    assert second.count("goodwill ") == 5
    assert "goodwill 29" in first and "goodwill 0" in second


def test_creating_a_token_shows_it_once_and_stores_only_its_hash(alice_client, unverified_alice):
    response = alice_client.post(reverse("tokens"), {"name": "laptop", "scope": TokenScope.READ_ONLY})
    raw = NEW_TOKEN.search(response.content.decode()).group(1).strip()
    token = ApiToken.objects.get(user=unverified_alice)
    assert token.token_hash == hash_token(raw)
    assert raw not in {token.name, token.prefix, token.token_hash}
    assert token.scope == TokenScope.READ_ONLY
    assert "no-store" in response["Cache-Control"]
    again = alice_client.get(reverse("tokens")).content.decode()
    assert raw not in again
    assert f"{token.prefix}…" in again


def test_a_new_token_comes_with_a_curl_and_a_cli_line_to_copy(alice_client, unverified_alice):
    html = alice_client.post(reverse("tokens"), {"name": "laptop", "scope": TokenScope.READ_WRITE}).content.decode()
    raw = NEW_TOKEN.search(html).group(1).strip()

    curl = re.search(r'data-testid="curl-line"[^>]*>([^<]+)<', html).group(1)
    cli = re.search(r'data-testid="cli-line"[^>]*>([^<]+)<', html).group(1)
    assert unescape(curl) == f'curl -s http://testserver/api/v1/account/ -H "Authorization: Bearer {raw}"'
    assert cli == f"starverse login --url http://testserver --token {raw}"
    assert 'data-copy="#curl-line"' in html and 'data-copy="#cli-line"' in html


def test_the_token_form_offers_90_days_and_a_token_made_with_it_expires_then(alice_client, unverified_alice):
    form = alice_client.get(reverse("tokens")).content.decode()
    assert re.search(r'name="expires_in_days" value="90"', form)

    html = alice_client.post(
        reverse("tokens"), {"name": "ci", "scope": TokenScope.READ_WRITE, "expires_in_days": 90}
    ).content.decode()

    token = ApiToken.objects.get(user=unverified_alice)
    # In the person's zone (Asia/Shanghai unless they chose another), with its offset; the instant in datetime="".
    shown = timezone.localtime(token.expires_at, ZoneInfo("Asia/Shanghai"))
    assert re.search(rf'It expires on <time datetime="[^"]+">{shown:%Y-%m-%d %H:%M} UTC\+8</time>\.', html)


def test_a_token_can_expire_in_some_days(alice_client, unverified_alice):
    alice_client.post(reverse("tokens"), {"name": "ci", "scope": TokenScope.READ_WRITE, "expires_in_days": 30})
    token = ApiToken.objects.get(user=unverified_alice)
    assert abs(token.expires_at - token.created_at - timedelta(days=30)) < timedelta(minutes=1)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (
            {"name": "ci", "scope": "read_write", "expires_in_days": 400},
            "Expires in (days): Ensure this value",
        ),
        (
            {"name": "ci", "scope": "read_write", "expires_in_days": "soon"},
            "Expires in (days): Enter a whole number",
        ),
        ({"name": "", "scope": "read_write"}, "Name: This field is required"),
        ({"name": "ci", "scope": "admin"}, "Scope: Select a valid choice"),
    ],
)
def test_bad_token_form_input_shows_a_field_error(alice_client, data, error):
    response = alice_client.post(reverse("tokens"), data)
    assert response.status_code == 200
    assert error in response.content.decode()
    assert not ApiToken.objects.exists()


def test_a_user_cannot_revoke_another_users_token(alice_client, unverified_bob):
    token, _ = ApiToken.issue(unverified_bob, name="bob's")
    response = alice_client.post(reverse("token_revoke", args=[token.pk]))
    assert response.status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None


def test_revoking_a_token_redirects_back_to_the_list(alice_client, unverified_alice):
    token, _ = ApiToken.issue(unverified_alice, name="old")
    response = alice_client.post(reverse("token_revoke", args=[token.pk]), follow=True)
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert "Revoked the token “old”" in response.content.decode()


def test_revoking_with_htmx_swaps_only_the_row(alice_client, unverified_alice):
    token, _ = ApiToken.issue(unverified_alice, name="old")
    response = alice_client.post(reverse("token_revoke", args=[token.pk]), headers={"HX-Request": "true"})
    html = response.content.decode()
    assert html.lstrip().startswith(f'<tr id="token-{token.pk}"')
    assert "revoked" in html
    assert "Revoke</button>" not in html


def test_the_dashboard_says_when_a_job_was_stopped_for_credit(client, unverified_alice):
    from django.utils import timezone

    from fleet.choices import JobStatus
    from fleet.models import Job

    job = Job.objects.create(
        owner=unverified_alice,
        model_name="llama-tiny",
        per_device_batch_size=4,
        max_steps=10,
        max_budget_per_hour=1_000_000,
        status=JobStatus.STOPPED_NO_CREDIT,
        status_reason="Your balance would run out within 2 minutes.",
        finished_at=timezone.now(),
    )
    client.force_login(unverified_alice)
    html = client.get("/dashboard/").content.decode()
    assert f"Job {job.pk}</a> was stopped before your credit ran out" in html
    assert "would run out within 2 minutes" in html


def test_every_page_names_its_icon_and_the_icon_ships(client):
    from django.contrib.staticfiles import finders

    html = client.get(reverse("pricing")).content.decode()

    assert '<link rel="icon" href="/static/img/favicon.svg' in html
    assert finders.find("img/favicon.svg")


def test_a_missing_page_is_a_404_in_the_site_s_layout_with_ways_back(alice_client):
    response = alice_client.get("/no/such/page/")

    assert response.status_code == 404
    html = response.content.decode()
    assert "Page not found" in html and "/no/such/page/" in html
    assert 'aria-label="Main"' in html and reverse("jobs") in html
