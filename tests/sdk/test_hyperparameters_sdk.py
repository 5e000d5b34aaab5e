"""Hyperparameters and n_epochs on quotes and jobs, in the SDK (`hyperparameters=` as starverse.Hyperparameters or a
mapping, `n_epochs=`; typed Job and Plan with `steps`) and the CLI (`--learning-rate` ... `--epochs`); a 400 naming a
nested field is a ValidationError whose `field` is its dotted path. Against the API's contract in-process (#31)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
import starverse
from starverse import cli
from starverse.errors import error_for

from tests.support.sdk_api import starverse_cli

SPEC = {"model": "llama-tiny", "max_budget": "28", "per_device_batch_size": 4, "dataset": "upload:1"}


def test_a_job_takes_typed_hyperparameters_and_epochs_and_answers_a_typed_job(fake_client, fake_api):
    chosen = starverse.Hyperparameters(learning_rate=1e-4, lr_scheduler="linear", warmup_steps=10, seed=3)

    data = fake_client.create_job(SPEC, hyperparameters=chosen, n_epochs=2)

    assert fake_api.last_json() == {**SPEC, "n_epochs": 2, "hyperparameters": chosen.to_api()}
    assert chosen.to_api() == {"learning_rate": 1e-4, "lr_scheduler": "linear", "warmup_steps": 10, "seed": 3}
    assert fake_api.requests[-1].headers["Idempotency-Key"]
    job = starverse.Job.from_api(data)
    assert (job.id, job.status, job.n_epochs, job.max_steps, job.cost) == (9, "queued", 2, 100, Decimal("0.00"))
    assert job.hyperparameters == starverse.Hyperparameters(
        learning_rate=1e-4, lr_scheduler="linear", warmup_steps=10, seed=3
    )
    assert job.plan.steps == 100 and job["status"] == "queued" and job.started_at is None


def test_a_quote_in_epochs_shows_its_steps(fake_client, fake_api):
    plan = starverse.Quote(fake_client.quote(SPEC, n_epochs=1.5, hyperparameters={"weight_decay": 0.1}))

    assert fake_api.last_json() == {**SPEC, "n_epochs": 1.5, "hyperparameters": {"weight_decay": 0.1}}
    assert plan.steps == 75 and "steps       75" in str(plan)


def test_a_bad_hyperparameter_is_a_validation_error_naming_it(fake_client):
    with pytest.raises(starverse.ValidationError) as refused:
        fake_client.create_job({**SPEC, "max_steps": 10}, hyperparameters={"learning_rate": 5})

    assert refused.value.field == "hyperparameters.learning_rate"
    message = "Ensure this value is less than or equal to 1.0."
    assert refused.value.fields == {"hyperparameters.learning_rate": [message]}
    assert "  hyperparameters.learning_rate: Ensure this value" in str(refused.value)


def test_nested_and_listed_field_errors_flatten_to_dotted_paths():
    body = {"detail": "Invalid input.", "errors": {"tracking": {"wandb": {"project": ["Required."]}}, "x": "y"}}
    error = error_for(400, body)

    assert isinstance(error, starverse.ValidationError)
    assert error.fields == {"tracking.wandb.project": ["Required."], "x": ["y"]}
    assert error.field == "tracking.wandb.project" and error.code is None


def test_trainer_fit_sends_epochs_and_hyperparameters_instead_of_max_steps(fake_client, fake_api):
    cluster = starverse.accelerate(
        "llama-tiny", max_budget=28, client=fake_client, hyperparameters=starverse.Hyperparameters(max_grad_norm=0.5)
    )
    assert fake_api.last_json()["hyperparameters"] == {"max_grad_norm": 0.5} and cluster.plan.steps == 1000

    run = starverse.Trainer(cluster).fit(
        "llama-tiny", dataset="upload:1", n_epochs=3, hyperparameters={"learning_rate": 3e-4}, follow=False
    )

    sent = fake_api.last_json()
    assert "max_steps" not in sent and sent["n_epochs"] == 3 and sent["hyperparameters"] == {"learning_rate": 3e-4}
    assert run.n_epochs == 3 and run.hyperparameters.learning_rate == 3e-4 and run.job.max_steps == 150


def test_the_cli_sends_hyperparameter_options_and_epochs(capsys, fake_client, fake_api):
    code, out, err = starverse_cli(
        capsys, "run", "--dataset", "upload:1", "--epochs", "2", "--learning-rate", "0.0003",
        "--lr-scheduler", "constant", "--warmup-ratio", "0.1", "--weight-decay", "0.01", "--max-grad-norm", "0.5",
        "--seed", "42", "--train-on-inputs", "--no-follow", "--json",
    )  # fmt: skip

    assert code == 0, err
    sent = fake_api.last_json()
    assert "max_steps" not in sent and sent["n_epochs"] == 2
    assert sent["hyperparameters"] == {
        "learning_rate": 0.0003, "lr_scheduler": "constant", "warmup_ratio": 0.1, "weight_decay": 0.01,
        "max_grad_norm": 0.5, "train_on_inputs": True, "seed": 42,
    }  # fmt: skip
    assert json.loads(out)["n_epochs"] == 2


def test_the_cli_quote_defaults_to_200_steps_and_shows_the_steps(capsys, fake_client, fake_api):
    code, out, err = starverse_cli(capsys, "quote", "--warmup-steps", "5", "--no-train-on-inputs")

    assert code == 0, err
    assert fake_api.last_json()["max_steps"] == 200 and "n_epochs" not in fake_api.last_json()
    assert fake_api.last_json()["hyperparameters"] == {"warmup_steps": 5, "train_on_inputs": False}
    assert "steps       200" in out


def test_the_cli_refuses_bad_training_options(capsys, fake_client, fake_api):
    code, _, err = starverse_cli(capsys, "quote", "--max-steps", "10", "--epochs", "1")
    assert code == 2 and "not both" in err
    code, _, err = starverse_cli(capsys, "quote", "--lr-scheduler", "step")
    assert code == 2 and "constant" in err
    assert fake_api.requests == []

    code, _, err = starverse_cli(capsys, "run", "--learning-rate", "5", "--no-follow")
    assert code == 1 and "hyperparameters.learning_rate: Ensure this value" in err


def test_starverse_version_is_the_installed_packages(capsys):
    from importlib.metadata import version

    code, out, _ = starverse_cli(capsys, "--version")

    assert code == 0 and out.strip() == f"starverse {version('starverse')}" == f"starverse {starverse.__version__}"


def test_shell_completion_scripts_and_completions(capsys, monkeypatch):
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")  # the shell named, not detected
    code, out, _ = starverse_cli(capsys, "--show-completion", "bash")
    assert code == 0 and "_STARVERSE_COMPLETE=complete_bash" in out and "complete -o default" in out

    monkeypatch.setenv("_STARVERSE_COMPLETE", "complete_bash")
    monkeypatch.setenv("COMP_WORDS", "starverse check")
    monkeypatch.setenv("COMP_CWORD", "1")
    with pytest.raises(SystemExit) as done:  # what the shell's hook runs: the installed script, in its process
        cli.app(prog_name="starverse")
    assert done.value.code == 0 and capsys.readouterr().out.split() == ["checkpoints"]
