"""Capacity that exists: only chips whose host is online are shown as capacity and planned on."""

from __future__ import annotations

from django.urls import reverse

from tests.support.plans import hand_plan
from workers.services.placement import allocate


def row_of(html: str, slug: str) -> str:
    start = html.index(f'data-chip="{slug}"')
    return html[start : html.index("</tr>", start)]


def test_pricing_shows_chips_online_free_simulated_and_the_declared_ones_offline(client, enroll, planning_job):
    enroll("v5e-a", chip="tpu-v5e", chips=2)
    busy, _ = enroll("v5e-b", chip="tpu-v5e", chips=1)
    allocate(planning_job(), hand_plan((busy, 1)))

    row = row_of(client.get(reverse("pricing")).content.decode(), "tpu-v5e")

    assert "3 online" in row and "simulated" in row and "2 free now" in row and "8 declared, offline" in row
    chips = {chip["slug"]: chip for chip in client.get("/api/v1/chips/").json()}
    assert (chips["tpu-v5e"]["capacity"], chips["tpu-v5e"]["free"], chips["tpu-v5e"]["offline"]) == (3, 2, 8)
    assert (chips["h100-80g"]["capacity"], chips["h100-80g"]["offline"]) == (0, 8)
