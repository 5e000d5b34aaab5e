"""/v1/fine_tuning/jobs with the official client: how a request maps onto a Starverse job, the job's object in
each status, cancel, events and checkpoints, pagination, and errors in OpenAI's shape."""

from __future__ import annotations

import openai
import pytest
from django.conf import settings
from django.utils import timezone

from fleet.choices import JobEventKind, JobStatus
from fleet.models import Job
from kernel.hyperparameters import SCRATCH, defaults
from kernel.modelspecs import resolve_model
from kernel.money import to_micros
from openai_api.job_create import AUTO_BATCH_SIZE, AUTO_EPOCHS
from tests.openai_api.test_files import error_of
from tests.support.openai_files import chat_jsonl
from workers.models import JobCheckpoint, JobEvent

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def platform(fund, alice, enroll, no_celery):
    fund(alice)
    enroll("oai-4090", "rtx-4090", chips=2)


@pytest.fixture
def client(alice, openai_for):
    return openai_for(alice)


@pytest.fixture
def training_file(client):
    return client.files.create(file=("train.jsonl", chat_jsonl(24)), purpose="fine-tune").id


def default_rate() -> float:
    return defaults("full", SCRATCH, resolve_model("llama-tiny").parameters)[0]


def test_a_job_maps_openais_parameters_onto_a_starverse_job(client, training_file, alice):
    validation = client.files.create(file=("valid.jsonl", chat_jsonl(4, seed=50)), purpose="fine-tune").id

    created = client.fine_tuning.jobs.create(
        model="llama-tiny",
        training_file=training_file,
        validation_file=validation,
        hyperparameters={"n_epochs": 2, "batch_size": 2, "learning_rate_multiplier": 0.5},
        suffix="adder",
        seed=1234,
    )

    job = Job.objects.get(owner=alice)
    assert created.id == f"ftjob-{job.pk}" and created.object == "fine_tuning.job" and created.status == "queued"
    assert created.training_file == training_file and created.validation_file == validation
    assert created.model == "llama-tiny" and created.seed == 1234 and created.user_provided_suffix == "adder"
    assert created.hyperparameters.n_epochs == 2 and created.hyperparameters.batch_size == 2
    assert created.hyperparameters.learning_rate_multiplier == 0.5
    assert created.fine_tuned_model is None and created.trained_tokens is None and created.error is None
    assert job.n_epochs == 2 and job.per_device_batch_size == 2 and job.max_steps >= 1 and job.name == "adder"
    assert job.hyperparameters["learning_rate"] == pytest.approx(default_rate() * 0.5)
    assert job.hyperparameters["seed"] == 1234 and job.mode == "full"
    assert job.eval_dataset_upload_id == int(validation.removeprefix("file-"))
    assert job.max_budget_per_hour == to_micros(settings.OPENAI_API_MAX_BUDGET)
    assert client.fine_tuning.jobs.retrieve(created.id).id == created.id


def test_the_supervised_method_and_auto_take_the_documented_defaults(client, training_file, alice):
    created = client.fine_tuning.jobs.create(
        model="llama-tiny",
        training_file=training_file,
        method={"type": "supervised", "supervised": {"hyperparameters": {"n_epochs": "auto", "batch_size": "auto"}}},
    )

    job = Job.objects.get(owner=alice)
    assert job.n_epochs == AUTO_EPOCHS and job.per_device_batch_size == AUTO_BATCH_SIZE
    assert job.hyperparameters["learning_rate"] == pytest.approx(default_rate())
    assert created.method.type == "supervised" and created.method.supervised.hyperparameters.n_epochs == AUTO_EPOCHS
    assert created.hyperparameters.learning_rate_multiplier == 1.0 and created.seed == job.pk


@pytest.mark.parametrize(
    ("changes", "param"),
    [
        ({"model": "no-such-model"}, "model"),
        ({"training_file": "file-999999"}, "training_file"),
        ({"validation_file": "ftjob-1"}, "validation_file"),
        ({"method": {"type": "dpo", "dpo": {}}}, "method.type"),
        ({"hyperparameters": {"batch_size": "big"}}, "hyperparameters.batch_size"),
        ({"hyperparameters": {"n_epochs": 0}}, "hyperparameters.n_epochs"),
        ({"hyperparameters": {"learning_rate_multiplier": 1e9}}, "hyperparameters.learning_rate_multiplier"),
        ({"hyperparameters": {"warmup": 3}}, "hyperparameters.warmup"),
        ({"suffix": "x" * 65}, "suffix"),
        ({"seed": "one"}, "seed"),
        ({"integrations": [{"type": "wandb", "wandb": {"project": "p"}}]}, "integrations"),
    ],
)
def test_a_bad_request_is_a_400_naming_openais_parameter(client, training_file, changes, param):
    with pytest.raises(openai.BadRequestError) as raised:
        client.fine_tuning.jobs.create(**{"model": "llama-tiny", "training_file": training_file, **changes})
    error = error_of(raised)
    assert error["param"] == param and error["type"] == "invalid_request_error", error
    assert not Job.objects.exists()


def test_an_unknown_argument_and_another_users_file_are_refused(client, training_file, bob, openai_for):
    with pytest.raises(openai.BadRequestError) as raised:
        client.fine_tuning.jobs.create(model="llama-tiny", training_file=training_file, extra_body={"max_steps": 3})
    assert error_of(raised)["param"] == "max_steps"
    with pytest.raises(openai.BadRequestError) as raised:
        openai_for(bob).fine_tuning.jobs.create(model="llama-tiny", training_file=training_file)
    assert error_of(raised)["param"] == "training_file"


def test_another_users_job_is_a_404_on_every_route(client, training_file, bob, openai_for):
    job = client.fine_tuning.jobs.create(model="llama-tiny", training_file=training_file)
    theirs = openai_for(bob).fine_tuning.jobs

    calls = (theirs.retrieve, theirs.cancel, theirs.list_events, theirs.checkpoints.list)
    for call in calls:
        with pytest.raises(openai.NotFoundError) as raised:
            call(job.id)
        assert error_of(raised)["message"] == f"No such fine-tuning job: {job.id}"
    assert list(theirs.list()) == []
    assert Job.objects.get().cancel_requested_at is None


def test_jobs_and_events_are_listed_newest_first_a_page_at_a_time(client, training_file, alice):
    ids = [client.fine_tuning.jobs.create(model="llama-tiny", training_file=training_file).id for _ in range(3)]

    page = client.fine_tuning.jobs.list(limit=2)
    assert [job.id for job in page.data] == ids[:0:-1] and page.has_more
    assert [job.id for job in client.fine_tuning.jobs.list(limit=2)] == ids[::-1]
    assert [job.id for job in client.fine_tuning.jobs.list(after=ids[1])] == ids[:1]

    job = Job.objects.get(pk=int(ids[0].removeprefix("ftjob-")))
    for n in range(3):
        JobEvent.objects.create(job=job, kind=JobEventKind.NOTICE, message=f"notice {n}", created_at=timezone.now())
    events = client.fine_tuning.jobs.list_events(ids[0], limit=2)
    assert [event.message for event in events.data] == ["notice 2", "notice 1"] and events.has_more
    everything = list(client.fine_tuning.jobs.list_events(ids[0], limit=2))
    assert [event.level for event in everything[:3]] == ["warn"] * 3 and len(everything) == job.events.count()
    with pytest.raises(openai.BadRequestError) as raised:
        client.fine_tuning.jobs.list(limit=101)
    assert error_of(raised)["param"] == "limit"


def test_a_succeeded_job_names_its_model_tokens_and_checkpoints(client, training_file):
    created = client.fine_tuning.jobs.create(model="llama-tiny", training_file=training_file)
    job = Job.objects.get(pk=int(created.id.removeprefix("ftjob-")))
    now = timezone.now()
    for step, loss in ((5, 2.5), (10, 2.0)):
        key = f"checkpoints/job-{job.pk}/step-{step}"
        JobCheckpoint.objects.create(
            job=job, epoch=0, step=step, key=key, loss=loss, eval_loss=loss + 1, created_at=now
        )
    Job.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED, tokens=4096, step=10, finished_at=now)

    done = client.fine_tuning.jobs.retrieve(created.id)
    assert done.status == "succeeded" and done.fine_tuned_model == f"job:{job.pk}" and done.trained_tokens == 4096
    assert done.finished_at == int(now.timestamp()) and done.estimated_finish is None and done.error is None
    checkpoints = client.fine_tuning.jobs.checkpoints.list(created.id).data
    assert [c.step_number for c in checkpoints] == [10, 5]
    assert checkpoints[0].metrics.train_loss == 2.0 and checkpoints[0].metrics.valid_loss == 3.0
    assert checkpoints[0].fine_tuning_job_id == created.id
    assert checkpoints[0].fine_tuned_model_checkpoint.endswith(f"/api/v1/jobs/{job.pk}/checkpoints/10/download/")


@pytest.mark.parametrize(
    ("status", "shown", "code"),
    [
        (JobStatus.PLANNING, "queued", None),
        (JobStatus.MIGRATING, "running", None),
        (JobStatus.FAILED, "failed", "job_failed"),
        (JobStatus.STOPPED_NO_CREDIT, "failed", "insufficient_credit"),
        (JobStatus.CANCELLED, "cancelled", None),
    ],
)
def test_each_status_reads_as_openais(client, training_file, status, shown, code):
    created = client.fine_tuning.jobs.create(model="llama-tiny", training_file=training_file)
    Job.objects.filter(pk=int(created.id.removeprefix("ftjob-"))).update(status=status, status_reason="why")

    job = client.fine_tuning.jobs.retrieve(created.id)
    assert job.status == shown and job.fine_tuned_model is None
    assert (job.error.code, job.error.message) == (code, "why") if code else job.error is None


def test_cancelling_a_queued_job_ends_it(client, training_file):
    created = client.fine_tuning.jobs.create(model="llama-tiny", training_file=training_file)

    cancelled = client.fine_tuning.jobs.cancel(created.id)

    assert cancelled.status == "cancelled" and cancelled.finished_at is not None
    assert client.fine_tuning.jobs.cancel(created.id).status == "cancelled"  # again: as it is
