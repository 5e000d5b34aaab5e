"""Datasets (upload, list, delete), a job's checkpoints (list, download, delete) and its TensorBoard files, in the
SDK (typed answers) and the CLI (`starverse datasets ...`, `checkpoints ...`, `tensorboard`), against the API's
contract in-process (tests/support/sdk_api.py); #31."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
import starverse

from tests.support.sdk_api import starverse_cli


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"text": "one"}\n{"text": "two"}\n')
    return path


# -- the SDK ---------------------------------------------------------------------------------------------------


def test_a_dataset_is_uploaded_listed_and_deleted_as_typed_objects(fake_client, fake_api, corpus):
    dataset = fake_client.upload_dataset(corpus, name="my corpus")

    assert isinstance(dataset, starverse.Dataset)
    assert (dataset.id, dataset.reference, dataset.name, dataset.samples) == (1, "upload:1", "my corpus", 2)
    assert isinstance(dataset.created_at, datetime) and dataset["reference"] == "upload:1"  # reads like the JSON
    sent = fake_api.requests[-1]
    assert sent.method == "POST" and sent.url.path == "/api/v1/datasets/"
    assert b'filename="corpus.jsonl"' in sent.content and b'{"text": "two"}' in sent.content
    assert fake_client.datasets() == [dataset] and fake_client.dataset(1).name == "my corpus"

    fake_client.delete_dataset(1)
    assert fake_api.last_call() == ("DELETE", "/api/v1/datasets/1/")
    assert fake_client.datasets() == []


def test_a_refused_dataset_is_a_validation_error_on_file(fake_client, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a"}\nnot json\n')

    with pytest.raises(starverse.ValidationError) as refused:
        fake_client.upload_dataset(bad)
    assert refused.value.field == "file" and "Line 2" in str(refused.value)
    with pytest.raises(FileNotFoundError):
        fake_client.upload_dataset(tmp_path / "missing.jsonl")


def test_checkpoints_are_listed_downloaded_and_deleted(fake_client, fake_api, tmp_path):
    checkpoints = fake_client.checkpoints(7)

    assert [checkpoint.step for checkpoint in checkpoints] == [40, 20]
    assert isinstance(checkpoints[0], starverse.Checkpoint) and checkpoints[0].loss == 1.25
    assert checkpoints[0].deletable is False and checkpoints.retention["keep_periodic"] == 3

    folder = fake_client.download_checkpoint(7, 20, tmp_path / "out")
    assert folder == tmp_path / "out" / "job-7-step-20-model"
    assert sorted(path.name for path in folder.iterdir()) == ["README.md", "config.json"]
    merged = fake_client.download_checkpoint(7, 40, tmp_path / "out", merged=True)
    assert merged.name == "job-7-step-40-model-merged" and fake_api.requests[-1].url.params["merged"] == "true"

    fake_client.delete_checkpoint(7, 20)
    assert fake_api.last_call() == (
        "DELETE",
        "/api/v1/jobs/7/checkpoints/20/",
    )
    assert [checkpoint.step for checkpoint in fake_client.checkpoints(7)] == [40]


def test_checkpoint_refusals_are_typed_with_their_code(fake_client, tmp_path):
    with pytest.raises(starverse.Conflict) as in_use:
        fake_client.delete_checkpoint(7, 40)
    assert in_use.value.code == "checkpoint_in_use" and in_use.value.status == 409
    with pytest.raises(starverse.NotFound, match="it has 20, 40") as missing:
        fake_client.download_checkpoint(7, 30, tmp_path)
    assert missing.value.code == "checkpoint_not_found"
    with pytest.raises(starverse.NotFound):
        fake_client.checkpoints(8)


def test_tensorboard_files_and_events_of_a_run(fake_client, tmp_path):
    run = starverse.Run(fake_client, {"id": 7, "status": "succeeded"})

    folder = run.download_tensorboard(tmp_path)
    assert folder == tmp_path / "job-7-tensorboard"
    assert (folder / "epoch-0" / "events.out.tfevents.1").read_bytes() == b"tb"
    (event,) = run.events()
    assert isinstance(event, starverse.Event) and (event.kind, event.data) == ("checkpoint", {"step": 20})
    assert [checkpoint.step for checkpoint in run.checkpoints()] == [40, 20]
    assert run.download_checkpoint(20, tmp_path).name == "job-7-step-20-model"


# -- the CLI ---------------------------------------------------------------------------------------------------


def test_the_cli_uploads_lists_and_deletes_datasets(capsys, fake_client, fake_api, corpus):
    code, out, err = starverse_cli(capsys, "datasets", "upload", str(corpus), "--name", "my corpus")
    assert code == 0, err
    assert "upload:1" in out and "my corpus" in out and "--dataset upload:1" in err

    code, out, _ = starverse_cli(capsys, "datasets", "list", "--json")
    assert code == 0 and [row["reference"] for row in json.loads(out)] == ["upload:1"]

    code, out, _ = starverse_cli(capsys, "dataset", "delete", "1")  # the singular works too
    assert code == 0 and "Deleted upload:1" in out and fake_api.datasets == {}
    code, _, err = starverse_cli(capsys, "datasets", "delete", "1")
    assert code == 1 and "NotFound" in err


def test_the_cli_lists_downloads_and_deletes_checkpoints(capsys, fake_client, fake_api, tmp_path):
    code, out, err = starverse_cli(capsys, "checkpoints", "7")
    assert code == 0, err
    assert out.index("40") < out.index("20") and "1.2500" in out and "(in use)" in out and "3 newest" in err

    code, out, _ = starverse_cli(capsys, "checkpoints", "7", "--json")
    assert code == 0 and [row["step"] for row in json.loads(out)["checkpoints"]] == [40, 20]

    code, out, err = starverse_cli(capsys, "checkpoints", "download", "7", "20", "-o", str(tmp_path))
    assert code == 0, err
    assert (tmp_path / "job-7-step-20-model" / "config.json").exists() and "config.json" in out

    code, _, err = starverse_cli(capsys, "checkpoints", "delete", "7", "40")
    assert code == 1 and "checkpoint_in_use" not in err and "resumes from" in err
    code, out, _ = starverse_cli(capsys, "checkpoints", "delete", "7", "20", "--json")
    assert code == 0 and json.loads(out) == {"job": 7, "step": 20, "deleted": True}


def test_the_cli_downloads_tensorboard_files(capsys, fake_client, tmp_path):
    code, out, err = starverse_cli(capsys, "tensorboard", "7", "--output", str(tmp_path))

    assert code == 0, err
    assert (tmp_path / "job-7-tensorboard" / "epoch-0").is_dir() and "tensorboard --logdir" in out
    assert starverse_cli(capsys, "tensorboard", "8")[0] == 1
