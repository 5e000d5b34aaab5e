"""Where other nodes reach a node: the address its agent declares, or the one the platform sees it at.

An agent that declares no address ("auto") gets the address its requests come from, kept current by
every poll; X-Forwarded-For is believed only from TRUSTED_PROXIES. The rank-0 node's address is
every rank's MASTER_ADDR.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from rest_framework.test import APIClient

from fleet.models import Node, Pool
from tests.support.plans import hand_plan
from workers.api.client_address import trusted_proxies
from workers.models import AgentCommand, EnrollmentToken
from workers.services.placement import allocate

pytestmark = pytest.mark.django_db

ENROLL, POLL = "/api/v1/agent/enroll/", "/api/v1/agent/poll/"


def enroll(peer: str = "203.0.113.5", forwarded: str | None = None, hostname: str = "gpu-1", **fields):
    pool = Pool.objects.get(chip_type__slug="rtx-4090")
    _, raw = EnrollmentToken.issue(pool, chips=1)
    body = {"enrollment_token": raw, "hostname": hostname, "chip_type": "rtx-4090", "chips": 1, "simulated": True}
    headers = {"HTTP_X_FORWARDED_FOR": forwarded} if forwarded is not None else {}
    return APIClient(REMOTE_ADDR=peer).post(ENROLL, {**body, **fields}, format="json", **headers)


def poll(token: str, peer: str, forwarded: str | None = None):
    api = APIClient(REMOTE_ADDR=peer)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    headers = {"HTTP_X_FORWARDED_FOR": forwarded} if forwarded is not None else {}
    return api.post(POLL, {}, format="json", **headers)


def test_an_agent_that_declares_no_address_is_recorded_where_the_platform_sees_it(catalog):
    response = enroll(peer="203.0.113.5")
    assert response.status_code == 201, response.json()
    assert (response.json()["address"], response.json()["address_source"]) == ("203.0.113.5", "observed")
    node = Node.objects.get(hostname="gpu-1")
    assert (node.address, node.address_observed) == ("203.0.113.5", True)


def test_auto_is_the_same_as_declaring_nothing(catalog):
    response = enroll(peer="203.0.113.9", address="auto")
    assert (response.json()["address"], response.json()["address_source"]) == ("203.0.113.9", "observed")


def test_an_observed_address_follows_the_agent_and_becomes_the_master_address(catalog, planning_job):
    token = enroll(peer="203.0.113.5").json()["node_token"]
    answer = poll(token, peer="198.51.100.20")
    assert answer.status_code == 200 and answer.json()["address"] == "198.51.100.20"
    node = Node.objects.get(hostname="gpu-1")
    assert node.address == "198.51.100.20"

    job = planning_job()
    allocate(job, hand_plan((node, 1)))
    [start] = AgentCommand.objects.filter(job=job, node=node)
    assert start.payload["ranks"][0]["master_addr"] == "198.51.100.20"


def test_a_declared_address_is_kept_wherever_the_agent_polls_from(catalog):
    response = enroll(peer="203.0.113.5", address="10.20.0.7")
    assert (response.json()["address"], response.json()["address_source"]) == ("10.20.0.7", "declared")
    answer = poll(response.json()["node_token"], peer="198.51.100.20")
    assert answer.json()["address"] == "10.20.0.7"
    assert Node.objects.get(hostname="gpu-1").address == "10.20.0.7"


def test_x_forwarded_for_from_an_untrusted_peer_is_ignored(catalog, settings):
    settings.TRUSTED_PROXIES = []
    response = enroll(peer="203.0.113.5", forwarded="10.0.0.66")
    assert response.json()["address"] == "203.0.113.5"


def test_behind_a_trusted_proxy_the_nearest_untrusted_hop_is_the_agent(catalog, settings):
    settings.TRUSTED_PROXIES = ["10.0.0.0/24", "192.0.2.9"]
    # The agent wrote a fake first hop; its real address is what our outer proxy (10.0.0.3) saw.
    response = enroll(peer="10.0.0.2", forwarded="6.6.6.6, 198.51.100.7, 192.0.2.9, 10.0.0.3")
    assert response.json()["address"] == "198.51.100.7"
    token = response.json()["node_token"]
    assert poll(token, peer="10.0.0.2", forwarded="198.51.100.8").json()["address"] == "198.51.100.8"
    assert poll(token, peer="203.0.113.1", forwarded="1.2.3.4").json()["address"] == "203.0.113.1"


def test_an_ipv4_mapped_peer_is_recorded_as_ipv4(catalog):
    assert enroll(peer="::ffff:10.1.2.3").json()["address"] == "10.1.2.3"


def test_when_the_platform_cant_tell_the_address_the_agent_must_declare_it(catalog, settings):
    settings.TRUSTED_PROXIES = ["10.0.0.2"]
    response = enroll(peer="10.0.0.2", forwarded="unknown")
    assert response.status_code == 400
    assert response.json()["code"] == "address_unknown" and "--address" in response.json()["errors"]["address"][0]
    assert not Node.objects.filter(hostname="gpu-1").exists()
    assert enroll(peer="10.0.0.2", forwarded="unknown", address="10.9.9.9").status_code == 201


@pytest.mark.parametrize(
    "address", ["not an address!", "0.0.0.0", "224.0.0.1", "fe80::1%eth0", "-bad.example", "10.1.2"]
)
def test_a_declared_address_must_be_an_ip_address_or_a_dns_name(catalog, address):
    response = enroll(address=address)
    assert response.status_code == 400 and "address" in response.json()["errors"]
    assert not Node.objects.filter(hostname="gpu-1").exists()


@pytest.mark.parametrize(
    ("declared", "recorded"),
    [("GPU-7.cluster.internal", "gpu-7.cluster.internal"), ("::1", "::1"), ("10.0.0.5", "10.0.0.5")],
)
def test_ip_addresses_and_dns_names_are_accepted(catalog, declared, recorded):
    response = enroll(address=declared)
    assert response.status_code == 201 and response.json()["address"] == recorded


def test_a_malformed_trusted_proxies_setting_says_what_is_wrong():
    with pytest.raises(ImproperlyConfigured, match="TRUSTED_PROXIES.*not-a-network"):
        trusted_proxies(("10.0.0.0/8", "not-a-network"))
