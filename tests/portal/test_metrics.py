"""Prometheus /metrics: request and database metrics plus the platform's gauges, for allowed scrapers only."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from base import heartbeats
from billing.models import BillingLine, SpotPrice
from fleet.choices import AgentStatus, AllocationMode, JobStatus
from fleet.models import Allocation, ChipType, Job, Node
from portal.metrics_access import parse_networks

pytestmark = pytest.mark.django_db

OUTSIDE = "203.0.113.7"


def scrape(client, address: str = "127.0.0.1", **headers):
    return client.get("/metrics", REMOTE_ADDR=address, **headers)


def samples(response) -> dict[tuple[str, tuple], float]:
    """{(name, sorted labels): value} of every sample in the exposition."""
    text = response.content.decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


# Who may scrape


def test_with_nothing_configured_only_loopback_may_scrape(client, settings):
    settings.METRICS_TOKEN, settings.METRICS_ALLOWED_NETWORKS = "", ()
    assert scrape(client).status_code == 200
    assert scrape(client, "::1").status_code == 200
    assert scrape(client, OUTSIDE).status_code == 403
    assert scrape(client, "10.0.0.8").status_code == 403


def test_the_bearer_token_lets_a_scraper_in_from_anywhere_and_nothing_else_does(client, settings):
    settings.METRICS_TOKEN, settings.METRICS_ALLOWED_NETWORKS = "scrape-secret", ()
    assert scrape(client, OUTSIDE, HTTP_AUTHORIZATION="Bearer scrape-secret").status_code == 200
    assert scrape(client, OUTSIDE, HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    assert scrape(client, OUTSIDE, HTTP_AUTHORIZATION="Basic scrape-secret").status_code == 403
    assert scrape(client, OUTSIDE).status_code == 403
    assert scrape(client).status_code == 403  # with a token configured, loopback needs it too


def test_allowed_addresses_and_networks_may_scrape_without_a_token(client, settings):
    settings.METRICS_TOKEN = ""
    settings.METRICS_ALLOWED_NETWORKS = parse_networks("10.20.0.0/16, 192.0.2.10")
    assert scrape(client, "10.20.3.4").status_code == 200
    assert scrape(client, "192.0.2.10").status_code == 200
    assert scrape(client, "192.0.2.11").status_code == 403
    assert scrape(client, "127.0.0.1").status_code == 403  # loopback is only the default


def test_behind_our_proxy_the_forwarded_client_counts_not_the_proxy(client, settings):
    settings.METRICS_TOKEN, settings.METRICS_ALLOWED_NETWORKS, settings.METRICS_TRUSTED_PROXIES = "", (), 1
    assert scrape(client, "127.0.0.1", HTTP_X_FORWARDED_FOR=OUTSIDE).status_code == 403
    assert scrape(client, "127.0.0.1", HTTP_X_FORWARDED_FOR=f"127.0.0.1, {OUTSIDE}").status_code == 403
    assert scrape(client, "127.0.0.1", HTTP_X_FORWARDED_FOR="127.0.0.1").status_code == 200


def test_a_bad_allowed_address_is_a_configuration_error_naming_it():
    with pytest.raises(ImproperlyConfigured, match="'10.0.0.300'"):
        parse_networks("10.0.0.1, 10.0.0.300")


def test_only_get_is_answered(client):
    assert client.post("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 405


# What is exported


def running_job(owner, node: Node, chips: int, mode: str = AllocationMode.ON_DEMAND, behind_s: int = 0) -> Job:
    job = Job.objects.create(
        owner=owner,
        model_name="llama-tiny",
        per_device_batch_size=4,
        max_steps=100,
        max_budget_per_hour=28_000_000,
        status=JobStatus.RUNNING,
        epoch=1,
    )
    now = timezone.now()
    Allocation.objects.create(
        job=job,
        node=node,
        chip_type=node.pool.chip_type,
        chips=chips,
        mode=mode,
        epoch=1,
        started_at=now - timedelta(seconds=behind_s + 60),
        billed_through=now - timedelta(seconds=behind_s + 60),
    )
    BillingLine.objects.filter(job=job).update(billed_through=now - timedelta(seconds=behind_s))  # the meter's mark
    return job


def test_request_and_database_metrics_come_from_django_prometheus(client):
    client.get("/healthz")
    exported = samples(scrape(client))
    names = {name for name, _ in exported}
    assert "django_http_requests_total_by_method_total" in names
    assert "django_db_execute_total" in names


def test_platform_gauges_count_jobs_chips_agents_and_prices(client, catalog, alice):
    node = Node.objects.filter(pool__chip_type__slug="rtx-4090").order_by("pk").first()
    Node.objects.filter(pk=node.pk).update(agent_status=AgentStatus.ONLINE, chips=8, spot_eligible=True)
    node.refresh_from_db()
    Node.objects.filter(pool__chip_type__slug="tpu-v5e").update(agent_status=AgentStatus.DRAINING)
    draining = Node.objects.filter(agent_status=AgentStatus.DRAINING).count()
    running_job(alice, node, chips=3, behind_s=40)
    running_job(alice, node, chips=2, mode=AllocationMode.SPOT)
    Job.objects.create(
        owner=alice, model_name="llama-tiny", per_device_batch_size=4, max_steps=10, max_budget_per_hour=1
    )
    chip = node.pool.chip_type
    SpotPrice.objects.create(
        chip_type=chip,
        at=timezone.now() - timedelta(seconds=5),
        price_per_hour=700_000,
        floor_per_hour=1,
        capacity=8,
        demand=1,
        allocated=1,
    )
    SpotPrice.objects.create(
        chip_type=chip, at=timezone.now(), price_per_hour=900_000, floor_per_hour=1, capacity=8, demand=1, allocated=1
    )

    exported = samples(scrape(client))

    assert exported[("starverse_platform_metrics_up", ())] == 1
    assert exported[("starverse_jobs", (("status", "running"),))] == 2
    assert exported[("starverse_jobs", (("status", "queued"),))] == 1
    assert exported[("starverse_jobs", (("status", "failed"),))] == 0
    assert exported[("starverse_chips_allocated", (("chip_type", "rtx-4090"), ("mode", "on_demand")))] == 3
    assert exported[("starverse_chips_allocated", (("chip_type", "rtx-4090"), ("mode", "spot")))] == 2
    assert exported[("starverse_chips_free", (("chip_type", "rtx-4090"), ("mode", "spot")))] == 8 - 5
    assert exported[("starverse_chips_free", (("chip_type", "rtx-4090"), ("mode", "on_demand")))] == 0
    assert exported[("starverse_chips_free", (("chip_type", "tpu-v5e"), ("mode", "on_demand")))] == 0  # draining
    assert exported[("starverse_agents_connected", ())] == 1 + draining
    assert exported[("starverse_nodes", (("status", "online"),))] == 1
    assert exported[("starverse_spot_clearing_price", (("chip_type", "rtx-4090"),))] == 0.9
    assert ("starverse_spot_clearing_price", (("chip_type", "tpu-v5e"),)) not in exported  # never cleared
    assert 40 <= exported[("starverse_meter_lag_seconds", ())] < 60
    every_type = set(ChipType.objects.values_list("slug", flat=True))
    assert {dict(labels)["chip_type"] for name, labels in exported if name == "starverse_chips_free"} == every_type


def test_heartbeats_and_the_last_ledger_audit_are_exported(client):
    heartbeats.mark("meter", now=timezone.now() - timedelta(seconds=7))
    heartbeats.mark("ledger_audit", problems=2)
    exported = samples(scrape(client))
    assert 7 <= exported[("starverse_meter_last_run_age_seconds", ())] < 30
    assert exported[("starverse_ledger_audit_problems", ())] == 2
    assert exported[("starverse_ledger_audit_last_run_age_seconds", ())] < 30


def test_without_a_database_the_process_metrics_still_answer(client, monkeypatch):
    from django.db import OperationalError

    def broken(self):
        raise OperationalError("database is down")

    monkeypatch.setattr("portal.metrics.PlatformCollector.jobs_by_status", broken)
    response = scrape(client)
    assert response.status_code == 200
    exported = samples(response)
    assert exported[("starverse_platform_metrics_up", ())] == 0
    assert not any(name == "starverse_jobs" for name, _ in exported)


def test_redis_is_reported_up_when_it_answers_and_down_when_it_does_not(client, settings):
    assert samples(scrape(client))[("starverse_redis_up", ())] == 1
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    assert samples(scrape(client))[("starverse_redis_up", ())] == 0
