"""A tiny model deployed on the simulated fleet and used with the official `openai` client through the gateway
(issue #32): plain and streamed chat with usage counted, a replica killed mid-stream and the next request
served by the other, scaling to zero and a cold start, another user's 404 and bad input in OpenAI's error
shape, and every second of every replica billed to the micro-unit.

The whole platform runs: live server (the gateway), a Celery worker with beat (planning, scaling, the meter)
and one simulated RTX 4090 agent with two chips; each replica runs `transformers serve` on the CPU.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import tarfile
from datetime import timedelta

import httpx
import openai
import psutil
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.utils import timezone

from billing.services.ledger import balance_of
from billing.services.meter.cost import billing_mark
from billing.services.reconciliation import differences
from fleet.choices import AgentStatus, JobStatus
from fleet.models import Allocation, Deployment, DeploymentStatus, Job, Node, ServedRequest
from tests.support.accounts import token_client
from tests.support.hfmodels import make_model_dir
from tests.support.stack import platform_stack, wait_until
from workers.services.deployments import create_deployment, stop_deployment, update_replicas

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

NAME = "tiny-chat"
HELLO = [{"role": "user", "content": "Say something about chips."}]


@pytest.fixture
def two_chip_stack(live_server, settings, tmp_path, alice, fund):
    call_command("seed_catalog", stdout=io.StringIO())
    fund(alice, "1000")
    settings.SERVING_MIN_IDLE_TIMEOUT_S = 1
    with platform_stack(live_server, settings, tmp_path) as stack:
        stack.add_agent("serve-4090", "rtx-4090", chips=2)
        wait_until(
            lambda: Node.objects.filter(hostname="serve-4090", agent_status=AgentStatus.ONLINE).exists(),
            60,
            "the agent to enroll",
            stack,
        )
        yield stack


def uploaded_model(user, tmp_path) -> str:
    folder = make_model_dir(tmp_path / "tiny-llama", "llama", max_position_embeddings=1024)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        archive.add(folder, arcname=folder.name)
    upload = SimpleUploadedFile("tiny-llama.tar.gz", buffer.getvalue())
    response = token_client(user).post("/api/v1/models/", {"name": "tiny-llama", "file": upload}, format="multipart")
    assert response.status_code == 201, response.content
    return response.json()["reference"]


def ready_replicas(deployment: Deployment, count: int, stack) -> list[Job]:
    return wait_until(
        lambda: (
            (jobs := list(Job.objects.filter(deployment=deployment, status=JobStatus.RUNNING, serving__state="ready")))
            and len(jobs) >= count
            and jobs
        ),
        240,
        f"{count} ready replica(s)",
        stack,
        explain=lambda: str(
            list(Job.objects.filter(deployment=deployment).values("pk", "status", "status_reason", "serving"))
        ),
    )


def replica_states(deployment: Deployment) -> str:
    jobs = Job.objects.filter(deployment=deployment).order_by("pk")
    return "\n".join(str(row) for row in jobs.values("pk", "status", "status_reason", "serving__state", "epoch"))


def replica_serving_now(replicas: list[Job]) -> tuple[Job, psutil.Process]:
    """The replica whose engine has a connection open (the stream in flight), and its replica process."""
    for job in replicas:
        port = int(job.serving["url"].rsplit(":", 1)[1].split("/")[0])
        engines = [
            c.pid for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port and c.status == "LISTEN"
        ]
        busy = [
            c for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port and c.status == "ESTABLISHED"
        ]
        if busy and engines:
            return job, psutil.Process(engines[0]).parent()
    raise AssertionError("no replica is serving a stream")


def test_a_deployment_serves_the_openai_client_survives_a_killed_replica_scales_to_zero_and_bills_exactly(
    two_chip_stack, live_server, alice, bob, token_for, tmp_path
):
    stack = two_chip_stack
    funds = balance_of(alice)
    deployment = create_deployment(
        alice,
        name=NAME,
        model_name=uploaded_model(alice, tmp_path),
        max_budget_per_hour=50_000_000,
        chip="rtx-4090",
        min_replicas=2,
        max_replicas=2,
        idle_timeout_s=600,
        max_model_len=1024,
    )
    replicas = ready_replicas(deployment, 2, stack)
    assert all(job.serving["simulated"] and job.serving["engine"] == "transformers" for job in replicas)
    client = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=token_for(alice), max_retries=0, timeout=120)

    # Plain and streamed chat, usage counted.
    assert [model.id for model in client.models.list()] == [NAME]
    # (The tiny model's weights are random: it may end its answer before max_tokens.)
    answer = client.chat.completions.create(model=NAME, messages=HELLO, max_tokens=5)
    assert 0 < answer.usage.completion_tokens <= 5 and answer.usage.prompt_tokens > 0
    chunks = list(client.chat.completions.create(model=NAME, messages=HELLO, max_tokens=6, stream=True))
    assert [c for c in chunks if c.choices and c.choices[0].delta.content]
    streamed = chunks[-1].usage  # the gateway asks every engine for the usage, sent last
    assert 0 < streamed.completion_tokens <= 6
    # The gateway records a request as its response closes, just after the client has the answer.
    wait_until(lambda: Deployment.objects.get(pk=deployment.pk).requests == 2, 30, "both requests recorded", stack)
    deployment.refresh_from_db()
    assert deployment.completion_tokens == answer.usage.completion_tokens + streamed.completion_tokens
    assert deployment.prompt_tokens == answer.usage.prompt_tokens + streamed.prompt_tokens

    # Another user's deployment is not found; bad input answers in OpenAI's error shape.
    with pytest.raises(openai.NotFoundError):
        openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=token_for(bob), max_retries=0).chat.completions.create(
            model=NAME, messages=HELLO, max_tokens=2
        )
    with pytest.raises(openai.BadRequestError) as too_many:
        client.chat.completions.create(model=NAME, messages=HELLO, max_tokens=10_000)
    assert too_many.value.body["param"] in ("max_tokens", "max_completion_tokens")
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=HELLO, max_tokens=2)

    # A replica killed mid-stream: that stream breaks; the next request goes to the other replica.
    # 800 tokens, the model's end-of-text ignored (transformers serve's `generation_config`): seconds of stream.
    long = {"generation_config": json.dumps({"min_new_tokens": 800})}
    stream = client.chat.completions.create(model=NAME, messages=HELLO, max_tokens=800, stream=True, extra_body=long)
    next(iter(stream))
    killed, process = replica_serving_now(replicas)
    os.killpg(process.pid, signal.SIGKILL)
    rest = []
    with contextlib.suppress(openai.APIError, httpx.HTTPError):
        rest.extend(stream)
    assert not any(chunk.usage for chunk in rest), "the stream ran to its end although its replica was killed"
    survivor = next(job for job in replicas if job.pk != killed.pk)
    again = client.chat.completions.with_raw_response.create(model=NAME, messages=HELLO, max_tokens=3)
    assert again.headers["x-starverse-replica"] == str(survivor.pk)
    assert again.parse().choices[0].message.role == "assistant"
    wait_until(
        lambda: Job.objects.filter(deployment=deployment).exclude(pk__in=[r.pk for r in replicas]).exists(),
        120,
        "a replacement replica",
        stack,
    )

    # Idle: scaled to zero (its replicas stop, their chips stop billing); then a cold start serves a request.
    update_replicas(deployment, min_replicas=0, idle_timeout_s=1)
    wait_until(
        lambda: (
            Deployment.objects.filter(pk=deployment.pk, status=DeploymentStatus.IDLE).exists()
            and not Allocation.objects.filter(job__deployment=deployment, ended_at__isnull=True).exists()
        ),
        120,
        "scaling to zero",
        stack,
    )
    try:
        cold = client.chat.completions.with_raw_response.create(model=NAME, messages=HELLO, max_tokens=2)
    except openai.APIError as error:
        raise AssertionError(f"{error!r}\n{replica_states(deployment)}\n{stack.logs()}") from None
    assert cold.parse().choices[0].message.role == "assistant"
    woken = int(cold.headers["x-starverse-replica"])
    assert woken not in {job.pk for job in replicas}
    wait_until(
        lambda: ServedRequest.objects.filter(deployment=deployment, replica_id=woken, cold_start=True).exists(),
        30,
        "the cold start's record",
        stack,
    )

    # Stopped: every replica's every second billed once, at the exact price integral, from the owner's wallet.
    stop_deployment(deployment)
    wait_until(
        lambda: not Job.objects.filter(deployment=deployment).exclude(status__in=JobStatus.finished()).exists(),
        120,
        "the replicas to end",
        stack,
    )
    allocations = Allocation.objects.filter(job__deployment=deployment)
    wait_until(
        lambda: all(a.billed_through == billing_mark(a.started_at, a.ended_at) for a in allocations.all()),
        60,
        "the meter's last charge",
        stack,
    )
    # Two replicas and the cold start's; the replacement's too when it was placed before the scale to zero.
    assert allocations.count() >= 3
    assert list(differences(timezone.now(), timedelta(0), allocations)) == []
    spent = sum(a.charged_total for a in allocations.all())
    assert spent > 0 and balance_of(alice) == funds - spent
