"""The official `openai` client fine-tunes llama-tiny on the live platform through /v1/ (issue #31): a chat
file, a job in epochs, polled until it has succeeded, then its events, checkpoints and fine-tuned model, which
a new job takes as its model.

The whole platform runs: live server, a Celery worker with beat and one simulated node agent training with the
real runtime (tests/support/stack.py). The run is tiny: 24 short chats, one epoch, a handful of steps.
"""

from __future__ import annotations

import time

import openai
import pytest

from fleet.models import Job
from tests.support.openai_files import chat_jsonl

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

RUN_TIMEOUT_S = 300


def test_the_openai_client_fine_tunes_llama_tiny_to_the_end(stack_with_agent, live_server, token_for, alice):
    client = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=token_for(alice), max_retries=0)

    training = client.files.create(file=("train.jsonl", chat_jsonl(24)), purpose="fine-tune")
    job = client.fine_tuning.jobs.create(
        model="llama-tiny",
        training_file=training.id,
        hyperparameters={"n_epochs": 1, "batch_size": 4},
        suffix="adder",
        seed=7,
    )
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while job.status not in ("succeeded", "failed", "cancelled") and time.monotonic() < deadline:
        time.sleep(1)
        job = client.fine_tuning.jobs.retrieve(job.id)

    assert job.status == "succeeded", f"{job.status}: {job.error}\n{stack_with_agent.logs()}"
    row = Job.objects.get(pk=int(job.id.removeprefix("ftjob-")))
    assert row.owner == alice and row.name == "adder" and row.n_epochs == 1 and row.step == row.max_steps
    assert job.fine_tuned_model == f"job:{row.pk}" and job.trained_tokens == row.tokens > 0
    assert job.seed == 7 and job.finished_at is not None and job.estimated_finish is None

    events = list(client.fine_tuning.jobs.list_events(job.id, limit=5))
    assert [event.data["kind"] for event in events][0] == "succeeded"
    assert {"queued", "placed", "succeeded"} <= {event.data["kind"] for event in events}
    checkpoints = client.fine_tuning.jobs.checkpoints.list(job.id).data
    assert checkpoints and checkpoints[0].step_number == row.max_steps
    assert checkpoints[0].metrics.train_loss is not None

    follow_up = client.fine_tuning.jobs.create(model=job.fine_tuned_model, training_file=training.id)
    assert follow_up.model == job.fine_tuned_model and follow_up.status in ("queued", "running")
    assert client.fine_tuning.jobs.cancel(follow_up.id).status == "cancelled"
