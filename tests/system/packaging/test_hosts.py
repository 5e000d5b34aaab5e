"""Each host runs with only its extra installed: the web tier without torch, deepspeed and peft; a compute
host without Django. Each probe runs in a fresh interpreter with the other extra's distributions hidden
(tests/support/probes/without.py), so an import that slipped in fails there as it would on that host."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleet.models import Pool
from portal.models import ApiToken
from tests.support.hfmodels import make_model_dir
from tests.support.model_archives import pack
from tests.support.probes.meta_oracle import meta_shapes
from tests.support.probes.pyproject_extras import installed_by
from tests.support.stack import test_database_url as database_url
from workers.models import EnrollmentToken
from workers.services.enrollment import enroll_node

REPOSITORY = Path(__file__).resolve().parents[3]
HERE = REPOSITORY / "tests" / "support" / "probes"  # without.py and the probes


def run_without(hidden: set[str], probe: str, *args: str, env: dict[str, str] | None = None) -> dict:
    """Run a probe with these distributions hidden; its `PROBE:` line as a dict."""
    command = [sys.executable, str(HERE / "without.py"), ",".join(sorted(hidden)), str(HERE / probe), *args]
    done = subprocess.run(
        command, cwd=REPOSITORY, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=600
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("PROBE: ")]
    assert done.returncode == 0 and lines, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return json.loads(lines[-1].removeprefix("PROBE: "))


@pytest.fixture
def rtx_4090s(catalog):
    pool = Pool.objects.get(chip_type__slug="rtx-4090")
    _, raw = EnrollmentToken.issue(pool, chips=2)
    enroll_node(enrollment_token=raw, hostname="fleet-1", chip_type="rtx-4090", chips=2, simulated=True)


@pytest.mark.django_db(transaction=True)
def test_the_web_tier_uploads_quotes_and_previews_without_torch_deepspeed_or_peft(alice, rtx_4090s, tmp_path):
    hidden = installed_by(["agent"]) - installed_by(["web"])
    assert {"torch", "deepspeed", "peft"} <= hidden
    folder = make_model_dir(tmp_path / "tiny-llama", "llama")  # torch is here, in the test's own process
    archive = pack(folder, tmp_path / "tiny-llama.tar.gz")
    _, token = ApiToken.issue(alice)
    data_dir = {"STARVERSE_DATA_DIR": str(tmp_path / "data"), "DATABASE_URL": database_url()}

    probe = run_without(hidden, "web_probe.py", str(archive), token, alice.username, env=data_dir)

    assert probe["findable"] == {"torch": False, "deepspeed": False, "peft": False}
    assert probe["loaded"] == []
    assert {
        "portal.urls",
        "portal.views.jobs",
        "workers.admin",
        "workers.tasks",
        "billing.api",
        "market.services.clearing",
    } <= set(probe["imported"])
    assert probe["check"] == 0
    assert probe["catalog_quote"]["status"] == 200, probe["catalog_quote"]
    assert probe["catalog_quote"]["body"]["chip_counts"] == {"rtx-4090": {"on_demand": 2}}
    assert probe["upload"]["status"] == 201, probe["upload"]
    config = json.loads((folder / "config.json").read_text())
    assert probe["upload"]["body"]["parameters"] == meta_shapes(config)[1].parameters
    assert probe["uploaded_quote"]["status"] == 200, probe["uploaded_quote"]
    assert probe["uploaded_quote"]["body"]["model"] == probe["upload"]["body"]["reference"]
    assert probe["dataset"]["status"] == 201, probe["dataset"]
    assert probe["preview"]["status"] == 200
    assert "&lt;|assistant|&gt;" in probe["preview"]["html"] and "token-trained" in probe["preview"]["html"]


def test_a_compute_host_runs_the_agent_and_a_rank_without_django():
    hidden = installed_by(["web"]) - installed_by(["agent"])
    assert {"django", "djangorestframework", "celery", "psycopg", "stripe"} <= hidden

    probe = run_without(hidden, "host_probe.py")

    assert probe["findable"] == {"django": False, "rest_framework": False}
    assert probe["loaded"] == []
    assert {"hosts.agent.loop", "hosts.runtime.engine", "hosts.runtime.export"} <= set(probe["imported"])
    assert math.isfinite(probe["loss"]) and probe["loss"] > 0
    assert probe["parameters"] > 0
    assert probe["agent_version"]
