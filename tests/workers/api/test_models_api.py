"""POST|GET /api/v1/models/ and GET|DELETE /api/v1/models/{id}/: users' own Hugging Face models.

A good upload is stored with its exact parameter count (a tree in object storage); every bad one gets a
4xx naming the problem, with nothing stored (no row, no object under models/).
"""

from __future__ import annotations

import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from fleet.choices import JobStatus
from fleet.models import Job, UploadedModel
from kernel.storage.trees import MANIFEST, read_manifest
from portal.models import TokenScope
from tests.support.accounts import token_client
from tests.support.model_archives import copy_model, member, pack, tar_with
from tests.support.stored import keys, own_store_url
from workers.services.storage import platform_store

pytestmark = pytest.mark.django_db

# Within every bound on one size (hfconfig.MAX_SIZES), but ~5 trillion parameters: past 128 chips of 80 GiB.
BEYOND_THE_FLEET = {
    "num_hidden_layers": 320, "hidden_size": 32768, "intermediate_size": 114688, "num_attention_heads": 256,
    "num_key_value_heads": 256, "vocab_size": 256000,
}  # fmt: skip


@pytest.fixture(autouse=True)
def own_store(settings, tmp_path) -> None:
    settings.STORAGE_URL = own_store_url(tmp_path)


@pytest.fixture(scope="module")
def archives(model_dirs, tmp_path_factory) -> dict[str, Path]:
    """Good and bad archives of the tiny models, made once for this module."""
    root = tmp_path_factory.mktemp("archives")
    llama = model_dirs["llama"]

    def variant(name: str, **changes) -> Path:
        return copy_model(llama, root / name, **changes)

    def raw_config(name: str, text: str) -> Path:
        folder = variant(name)
        (folder / "config.json").write_text(text)
        return pack(folder, root / f"{name}.tar.gz")

    config = (llama / "config.json").read_text().rstrip().removesuffix("}")
    stray = variant("stray")
    (stray / "extra.safetensors").write_bytes((stray / "model.safetensors").read_bytes())
    tokenizer_files = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
    not_an_archive = root / "notes.tar.gz"
    not_an_archive.write_text("config.json and the weights are attached")
    return {
        "llama": pack(llama, root / "tiny-llama.tar.gz", top="tiny-llama"),
        "qwen2": pack(model_dirs["qwen2"], root / "tiny-qwen2.zip"),
        "pickle": tar_with(root / "pickle.tar.gz", llama, member("pytorch_model.bin"), data=b"\x80\x04."),
        "gpt2": pack(
            variant("gpt2", config={"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}), root / "g.tgz"
        ),
        "shapes": pack(variant("shapes", config={"intermediate_size": 96}), root / "shapes.tar"),
        "no-tokenizer": pack(variant("no-tokenizer", drop=tokenizer_files), root / "no-tokenizer.zip"),
        "no-config": pack(variant("no-config", drop=("config.json",)), root / "no-config.tar.gz"),
        "dot-dot": tar_with(root / "dot-dot.tar.gz", llama, member("../../evil.txt"), data=b"x"),
        "absolute": tar_with(root / "absolute.tar.gz", llama, member("/tmp/evil.txt"), data=b"x"),
        "symlink": tar_with(root / "symlink.tar.gz", llama, member("notes", tarfile.SYMTYPE, link="/etc/passwd")),
        "not-an-archive": not_an_archive,
        "padding": tar_with(root / "padding.tar.gz", llama, member("padding.dat"), data=bytes(2 * 1024 * 1024)),
        "stray-weights": pack(stray, root / "stray.tar.gz"),
        "deep-config": raw_config("deep", config + ', "x": ' + "[" * 5000 + "]" * 5000 + "}"),
        "surrogate-config": raw_config("surrogate", config + ', "note": "\\ud800"}'),
        "nul-config": raw_config("nul", config + ', "note": "a\\u0000b"}'),
        "huge-config": pack(variant("huge", config={"num_hidden_layers": 10**6}), root / "huge.tar.gz"),
        "no-fleet-fits": pack(variant("no-fleet-fits", config=BEYOND_THE_FLEET), root / "beyond.tar.gz"),
    }


def upload(alice_api, archive: Path, **fields):
    with open(archive, "rb") as file:
        return alice_api.post("/api/v1/models/", {"file": file, **fields}, format="multipart")


def stored_files() -> list[str]:
    return keys("models")


@pytest.fixture
def alice_api(alice):
    return token_client(alice)


# -- good uploads ----------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_a_tiny_model_is_stored_with_its_exact_parameter_count(alice_api, alice, archives, real_parameters, family):
    answer = upload(alice_api, archives[family], name=f"my {family}")

    assert answer.status_code == 201, answer.json()
    body = answer.json()
    model = UploadedModel.objects.get(owner=alice)
    assert body["id"] == model.pk
    assert body["reference"] == f"model:{model.pk}"
    assert body["name"] == f"my {family}"
    assert body["architecture"] == family
    assert body["parameters"] == real_parameters[family]
    assert body["size_bytes"] == model.size_bytes > 0
    assert body["created_at"]
    assert model.store_prefix.startswith(f"models/{alice.pk}/")
    manifest = read_manifest(platform_store(), model.store_prefix)
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(manifest.files)
    assert manifest.size == model.size_bytes
    assert stored_files() == sorted(f"{model.store_prefix}/{name}" for name in [*manifest.files, MANIFEST])


def test_an_uploaded_model_in_a_storage_folder_is_private_files_in_private_folders(
    alice_api, archives, settings, tmp_path
):
    settings.STORAGE_URL = f"file://{tmp_path / 'storage'}"
    assert upload(alice_api, archives["llama"]).status_code == 201

    modes = {stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "storage" / "models").rglob("*")}
    assert modes == {0o600, 0o700}
    assert stat.S_IMODE((tmp_path / "storage" / "models").stat().st_mode) == 0o700


def test_the_name_defaults_to_the_archive_name(alice_api, archives):
    assert upload(alice_api, archives["llama"]).json()["name"] == "tiny-llama"


def test_the_list_has_the_catalog_and_only_your_uploads(alice_api, alice, bob, archives):
    mine = upload(alice_api, archives["llama"]).json()
    upload(token_client(bob), archives["qwen2"])

    listed = alice_api.get("/api/v1/models/").json()

    catalog = [entry for entry in listed if entry["source"] == "catalog"]
    assert {entry["reference"] for entry in catalog} >= {"llama-tiny", "llama-2-7b", "llama-2-70b"}
    tiny = next(entry for entry in catalog if entry["reference"] == "llama-tiny")
    assert tiny["parameters"] == 164_672 and tiny["description"] and tiny["id"] is None
    uploads = [entry for entry in listed if entry["source"] == "upload"]
    assert [entry["reference"] for entry in uploads] == [mine["reference"]]


def test_a_model_is_shown_with_its_config_and_shape_to_its_owner_only(alice_api, bob, archives):
    model = upload(alice_api, archives["llama"]).json()
    url = f"/api/v1/models/{model['id']}/"

    shown = alice_api.get(url).json()

    assert shown["config"]["model_type"] == "llama"
    assert shown["shape"]["parameters"] == model["parameters"] and "q_proj" in shown["shape"]["linears"]
    bobs = token_client(bob)
    assert bobs.get(url).status_code == 404
    assert bobs.delete(url).status_code == 404
    assert UploadedModel.objects.filter(pk=model["id"]).exists()
    for unknown in ["99999999999999999999999", "abc", "²"]:
        assert alice_api.get(f"/api/v1/models/{unknown}/").status_code == 404


def test_deleting_a_model_removes_it_and_its_files(alice_api, archives, django_capture_on_commit_callbacks):
    model = upload(alice_api, archives["llama"]).json()

    with django_capture_on_commit_callbacks(execute=True):
        assert alice_api.delete(f"/api/v1/models/{model['id']}/").status_code == 204

    assert not UploadedModel.objects.exists()
    assert stored_files() == []


def test_a_model_a_job_still_trains_cannot_be_deleted_until_the_job_ends(alice_api, alice, archives):
    model = upload(alice_api, archives["llama"]).json()
    job = Job.objects.create(
        owner=alice, model_name=model["reference"], per_device_batch_size=4, max_steps=10,
        max_budget_per_hour=28_000_000, status=JobStatus.RUNNING,
    )  # fmt: skip

    refused = alice_api.delete(f"/api/v1/models/{model['id']}/")

    assert refused.status_code == 409
    assert f"used by job {job.pk} (running)" in refused.json()["detail"]
    assert stored_files()
    Job.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED)
    assert alice_api.delete(f"/api/v1/models/{model['id']}/").status_code == 204


# -- bad uploads: a 4xx naming the problem, nothing stored -----------------------------------------


@pytest.mark.parametrize(
    ("archive", "code", "says"),
    [
        ("pickle", "pickle_weights", "safe_serialization=True"),
        ("gpt2", "unsupported_model", "Unsupported model architecture 'gpt2'"),
        ("shapes", "weights_mismatch", "has shape [128, 64]; config.json implies [96, 64]"),
        ("no-tokenizer", "missing_tokenizer", "No tokenizer"),
        ("no-config", "missing_config", "No config.json"),
        ("dot-dot", "unsafe_archive", "outside the model folder"),
        ("absolute", "unsafe_archive", "absolute path"),
        ("symlink", "unsafe_archive", "is a link"),
        ("not-an-archive", "not_an_archive", "not a .tar.gz, .tgz, .tar or .zip archive"),
        ("padding", "unneeded_file", "'padding.dat' is not a file any loader reads"),
        ("stray-weights", "unneeded_file", "'extra.safetensors' holds weights that config.json and the index don't"),
        ("deep-config", "invalid_config", "config.json is nested too deeply"),
        ("surrogate-config", "invalid_config", "config.json holds a NUL character or a lone surrogate"),
        ("nul-config", "invalid_config", "config.json holds a NUL character or a lone surrogate"),
        ("huge-config", "unsupported_model", "num_hidden_layers is 1,000,000; models trained here have at most 320"),
        ("no-fleet-fits", "model_too_large_for_fleet", "even as LoRA on 128 chips (the most a job may use)"),
    ],
)
def test_a_bad_upload_is_refused_naming_the_problem_with_nothing_stored(alice_api, archives, archive, code, says):
    answer = upload(alice_api, archives[archive])

    assert answer.status_code == 400
    body = answer.json()
    assert body["code"] == code
    assert says in body["errors"]["file"][0]
    assert not UploadedModel.objects.exists()
    assert stored_files() == []


def test_an_upload_over_the_size_limit_is_refused_as_it_streams_in(alice_api, archives, settings):
    settings.MODEL_MAX_BYTES = 10_000

    answer = upload(alice_api, archives["llama"])

    assert answer.status_code == 413
    assert "the limit is 10,000 bytes" in answer.json()["detail"]
    assert not UploadedModel.objects.exists() and stored_files() == []


def test_an_archive_that_unpacks_past_the_size_limit_is_refused(alice_api, settings, tmp_path):
    settings.MODEL_MAX_BYTES = 1024 * 1024
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as bundle:
        bundle.writestr("model.safetensors", bytes(8 * 1024 * 1024))

    answer = upload(alice_api, bomb)

    assert answer.status_code == 413
    assert "unpacks to more than that" in answer.json()["detail"]
    assert stored_files() == []


def test_a_model_past_the_storage_quota_is_refused_naming_it_and_nothing_is_stored(alice_api, archives, settings):
    settings.STORAGE_QUOTA_BYTES = 100_000

    answer = upload(alice_api, archives["llama"])

    assert answer.status_code == 400 and answer.json()["code"] == "storage_quota_exceeded"
    refusal = answer.json()["errors"]["file"][0]
    assert "your storage quota is 97.7 KB and your datasets and models already use 0 bytes" in refusal
    assert not UploadedModel.objects.exists() and stored_files() == []


def test_an_upload_without_a_file_names_the_field(alice_api):
    answer = alice_api.post("/api/v1/models/", {"name": "nothing"}, format="multipart")

    assert answer.status_code == 400
    assert answer.json()["code"] == "required" and "archive" in answer.json()["errors"]["file"][0]


def test_an_unknown_field_is_refused_by_name(alice_api, archives):
    with open(archives["llama"], "rb") as file:
        answer = alice_api.post("/api/v1/models/", {"file": file, "nmae": "typo"}, format="multipart")

    assert answer.status_code == 400
    assert answer.json()["code"] == "unknown_field" and "nmae" in answer.json()["errors"]
    assert not UploadedModel.objects.exists()


def test_a_read_only_token_cannot_upload(alice, archives):
    assert upload(token_client(alice, scope=TokenScope.READ_ONLY), archives["llama"]).status_code == 403


# -- checking one model by name --------------------------------------------------------------------


def test_a_name_is_checked_against_what_the_platform_can_train(alice_api, bob, archives, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    mine = upload(alice_api, archives["llama"]).json()
    bobs = upload(token_client(bob), archives["qwen2"]).json()

    assert alice_api.get("/api/v1/models/", {"name": "llama-tiny"}).json()[0]["source"] == "catalog"
    assert alice_api.get("/api/v1/models/", {"name": mine["reference"]}).json() == [mine]
    for name, says in [
        (bobs["reference"], f"no model {bobs['reference']} among yours"),
        ("meta-llama/Llama-2-7b-hf", "isn't in this platform's Hugging Face cache"),
        ("gpt-5", "Unknown model 'gpt-5'"),
    ]:
        answer = alice_api.get("/api/v1/models/", {"name": name})
        assert answer.status_code == 400
        assert answer.json()["code"] == "model_unavailable"
        assert says in answer.json()["errors"]["name"][0]


def test_the_schema_documents_the_models_endpoints(alice_api):
    paths = alice_api.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()["paths"]

    assert {"get", "post"} <= set(paths["/api/v1/models/"])
    assert {"get", "delete"} <= set(paths["/api/v1/models/{id}/"])
    assert "413" in paths["/api/v1/models/"]["post"]["responses"]


def test_a_store_that_fails_is_a_503_and_nothing_is_kept(alice_api, archives, settings, tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    settings.STORAGE_URL = f"file://{tmp_path / 'a-file' / 'store'}"

    answer = upload(alice_api, archives["llama"])

    assert answer.status_code == 503
    assert answer.json()["detail"].startswith("The model could not be stored right now")
    assert not UploadedModel.objects.exists()
