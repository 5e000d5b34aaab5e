"""The SDK and the CLI with a user's own models, against a live server: upload, list, delete, and model names."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
import starverse
from starverse import cli
from starverse.training import Cluster, Plan

from fleet.models import UploadedModel
from tests.support.model_archives import copy_model, pack
from tests.support.stored import own_store_url


@pytest.fixture(autouse=True)
def environment(monkeypatch, settings, tmp_path):
    """No URL, key or config file of the machine; storage of its own and an empty Hugging Face cache."""
    for variable in ("STARVERSE_URL", "STARVERSE_API_KEY", "STARVERSE_CONFIG", "HF_HUB_CACHE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("COLUMNS", "200")
    settings.STORAGE_URL = own_store_url(tmp_path)


@pytest.fixture
def sdk(live_server, token_for, alice) -> starverse.Client:
    return starverse.Client(live_server.url, token_for(alice), backoff=0.01)


@pytest.fixture
def configured(monkeypatch, live_server, token_for, alice) -> None:
    """The SDK's and the CLI's configuration from the environment, as a user's shell would set it."""
    monkeypatch.setenv("STARVERSE_URL", live_server.url)
    monkeypatch.setenv("STARVERSE_API_KEY", token_for(alice))


def starverse_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- the SDK ---------------------------------------------------------------------------------------


def test_a_model_folder_is_packed_uploaded_listed_and_deleted(sdk, model_dirs, real_parameters):
    model = sdk.upload_model(model_dirs["llama"], name="sdk llama")

    assert model["reference"] == f"model:{model['id']}" and model["name"] == "sdk llama"
    assert model["parameters"] == real_parameters["llama"]
    assert model["reference"] in {entry["reference"] for entry in sdk.models()}
    assert sdk.model(model["id"])["config"]["model_type"] == "llama"
    sdk.delete_model(model["id"])
    assert not UploadedModel.objects.exists()


def test_an_archive_is_sent_as_it_is_and_named_after_its_file(sdk, model_dirs, tmp_path):
    archive = pack(model_dirs["qwen2"], tmp_path / "tiny-qwen.zip")

    model = sdk.upload_model(archive)

    assert model["name"] == "tiny-qwen" and model["architecture"] == "qwen2"


def test_a_folder_of_links_uploads_the_files_they_point_to(sdk, model_dirs, tmp_path):
    linked = tmp_path / "linked"
    linked.mkdir()
    for path in model_dirs["llama"].iterdir():
        (linked / path.name).symlink_to(path)

    assert sdk.upload_model(linked)["name"] == "linked"


def test_a_refused_upload_is_a_validation_error_naming_the_problem(sdk, model_dirs, tmp_path):
    folder = copy_model(model_dirs["llama"], tmp_path / "pickled")
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04.")

    with pytest.raises(starverse.ValidationError) as refused:
        sdk.upload_model(folder)

    assert "pytorch_model.bin" in refused.value.errors["file"][0]
    assert refused.value.body["code"] == "pickle_weights"


def test_a_path_that_is_neither_folder_nor_file_is_refused_before_any_request(sdk, tmp_path):
    with pytest.raises(FileNotFoundError, match="No model folder or archive"):
        sdk.upload_model(tmp_path / "nowhere")


def test_the_module_level_upload_uses_the_configured_platform(configured, model_dirs):
    assert starverse.upload_model(model_dirs["llama"])["source"] == "upload"


# -- model names in the training API ---------------------------------------------------------------


def test_catalog_names_and_uploads_are_taken_as_they_are(sdk):
    assert starverse.ModelConfig.from_pretrained("llama-tiny", client=sdk).name == "llama-tiny"
    assert starverse.ModelConfig.from_pretrained("model:12345", client=sdk).name == "model:12345"


def test_a_hub_id_is_checked_with_the_platform_when_a_client_is_at_hand(sdk):
    with pytest.raises(starverse.ValidationError) as missing:
        starverse.ModelConfig.from_pretrained("meta-llama/Llama-2-70b-hf", client=sdk)

    assert "isn't in this platform's Hugging Face cache" in str(missing.value)
    assert "model:<id>" in str(missing.value)


def test_a_hub_id_is_checked_with_the_cluster_of_an_enclosing_mesh(sdk):
    cluster = Cluster(sdk, "llama-tiny", "cost-performance", Decimal(28), {}, Plan({}))

    with cluster.mixed_mesh(), pytest.raises(starverse.ValidationError, match="model_unavailable|Invalid input"):
        starverse.ModelConfig.from_pretrained("meta-llama/Llama-2-70b-hf")


def test_without_a_client_a_hub_id_is_left_for_the_platform_to_judge():
    assert starverse.ModelConfig.from_pretrained("meta-llama/Llama-2-70b-hf").name == "meta-llama/Llama-2-70b-hf"


# -- the CLI ---------------------------------------------------------------------------------------


def test_the_cli_uploads_lists_and_deletes_a_model(configured, capsys, model_dirs):
    code, out, err = starverse_cli(capsys, "model", "upload", str(model_dirs["llama"]), "--name", "cli llama", "--json")
    assert code == 0, err
    model = json.loads(out)
    assert model["name"] == "cli llama"

    code, out, _ = starverse_cli(capsys, "model", "list")
    assert code == 0
    assert model["reference"] in out and "llama-tiny" in out and "catalog" in out

    code, out, _ = starverse_cli(capsys, "model", "delete", str(model["id"]))
    assert code == 0 and f"Deleted {model['reference']}." in out
    code, out, _ = starverse_cli(capsys, "model", "list", "--json")
    assert model["reference"] not in {entry["reference"] for entry in json.loads(out)}


def test_the_cli_upload_prints_the_reference_to_train_with(configured, capsys, model_dirs):
    code, out, err = starverse_cli(capsys, "model", "upload", str(model_dirs["qwen2"]))

    model = UploadedModel.objects.get()
    assert code == 0
    assert model.reference in out and "qwen2" in out
    assert f"starverse run --model {model.reference}" in err


def test_the_cli_refuses_a_bad_model_with_exit_1_naming_the_problem(configured, capsys, model_dirs, tmp_path):
    folder = copy_model(model_dirs["llama"], tmp_path / "no-config", drop=("config.json",))

    code, _, err = starverse_cli(capsys, "model", "upload", str(folder))

    assert code == 1
    assert "No config.json" in err


def test_the_cli_upload_of_a_missing_path_is_a_usage_error(configured, capsys, tmp_path):
    code, _, err = starverse_cli(capsys, "model", "upload", str(Path(tmp_path / "nowhere")))

    assert code == 2
    assert "does not exist" in err
