"""The SDK against a live server (#31): a dataset uploaded, quoted and submitted in epochs with hyperparameters,
listed and deleted; the real API's 400 for a bad hyperparameter or uncountable epochs names the field."""

from __future__ import annotations

import pytest
import starverse

from fleet.models import Dataset, Job
from tests.support.jobs import JOB_SPEC

pytestmark = pytest.mark.django_db(transaction=True)

SPEC = {key: value for key, value in JOB_SPEC.items() if key != "max_steps"}


@pytest.fixture
def sdk(live_server, token_for, alice, fund, enroll, no_celery) -> starverse.Client:
    fund(alice)
    enroll("e-4090", "rtx-4090", chips=2)
    return starverse.Client(live_server.url, token_for(alice), backoff=0.01)


def test_a_dataset_is_trained_in_epochs_with_hyperparameters_then_deleted(sdk, tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(f"line {i} of a small corpus for training" for i in range(200)))

    dataset = sdk.upload_dataset(path, name="corpus")
    assert dataset.reference == f"upload:{dataset.id}" and dataset.name == "corpus" and dataset.size_bytes > 0
    assert [found.id for found in sdk.datasets()] == [dataset.id]

    spec = {**SPEC, "dataset": dataset.reference}
    plan = starverse.Quote(sdk.quote(spec, n_epochs=2))
    assert plan.steps > 1
    chosen = starverse.Hyperparameters(learning_rate=1e-4, lr_scheduler="linear", seed=5)
    job = starverse.Job.from_api(sdk.create_job(spec, n_epochs=2, hyperparameters=chosen))
    assert (job.n_epochs, job.max_steps) == (2, Job.objects.get().max_steps)
    assert (job.hyperparameters.learning_rate, job.hyperparameters.lr_scheduler, job.hyperparameters.seed) == (
        1e-4,
        "linear",
        5,
    )

    Job.objects.all().delete()  # a job that uses it would keep it
    sdk.delete_dataset(dataset.id)
    assert sdk.datasets() == [] and not Dataset.objects.exists()


def test_the_apis_refusals_name_the_field(sdk):
    with pytest.raises(starverse.ValidationError) as bad_rate:
        sdk.quote({**SPEC, "max_steps": 10}, hyperparameters={"learning_rate": 5})
    assert bad_rate.value.field == "hyperparameters.learning_rate"

    with pytest.raises(starverse.ValidationError) as unknown:
        sdk.quote({**SPEC, "max_steps": 10}, hyperparameters={"learning_rat": 0.1})
    assert unknown.value.field == "hyperparameters.learning_rat"

    with pytest.raises(starverse.ValidationError, match="synthetic") as endless:
        sdk.create_job(SPEC, n_epochs=2)
    assert endless.value.field == "n_epochs" and not Job.objects.exists()
