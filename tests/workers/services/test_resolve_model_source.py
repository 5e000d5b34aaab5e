"""resolve_model_source: the model a job names, as planning needs it: catalog, model:<id>, or a cached Hub id;
and a Hub snapshot stored once, before the first launch that trains it."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from kernel.modelspecs import CATALOG
from kernel.storage.trees import read_manifest
from tests.support.model_archives import pack
from tests.support.stored import keys, own_store_url
from workers.services.models import ModelUnavailable, resolve_model_source, store_hub_snapshot, store_model
from workers.services.storage import platform_store

pytestmark = pytest.mark.django_db

REVISION = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(autouse=True)
def own_store(settings, tmp_path) -> None:
    settings.STORAGE_URL = own_store_url(tmp_path)


@pytest.fixture
def hf_home(monkeypatch, tmp_path) -> Path:
    """An empty Hugging Face home of this test's own: the platform's cache."""
    home = tmp_path / "hf-home"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    return home


def cache_repo(hf_home: Path, repo_id: str, folder: Path) -> Path:
    """Put a model folder in the cache as huggingface_hub lays it out: blobs, a snapshot of links to them, refs/main."""
    repo = hf_home / "hub" / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for path in folder.iterdir():
        blob = repo / "blobs" / hashlib.sha256(path.read_bytes()).hexdigest()
        shutil.copyfile(path, blob)
        (snapshot / path.name).symlink_to(Path("..", "..", "blobs", blob.name))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    return snapshot


def upload_of(folder: Path, tmp_path: Path) -> SimpleUploadedFile:
    archive = pack(folder, tmp_path / f"{folder.name}.tar.gz")
    return SimpleUploadedFile(archive.name, archive.read_bytes(), content_type="application/gzip")


def test_a_catalog_name_is_its_config_with_the_exact_shape():
    source = resolve_model_source(" llama-tiny ")

    assert source.source == "catalog" and source.reference == source.name == "llama-tiny"
    assert source.config == CATALOG["llama-tiny"].config
    assert source.store_prefix is None and source.location is None
    assert source.shape.parameters == 164_672
    assert source.seq_len == CATALOG["llama-tiny"].seq_len


def test_an_upload_is_its_folder_config_and_shape(alice, model_dirs, real_parameters, tmp_path):
    model = store_model(alice, upload_of(model_dirs["qwen2"], tmp_path), "mine")

    source = resolve_model_source(model.reference, owner=alice)

    assert source.source == "upload" and source.reference == model.reference and source.name == "mine"
    assert source.store_prefix == model.store_prefix and source.location == f"store:{model.store_prefix}"
    assert "model.safetensors" in read_manifest(platform_store(), source.store_prefix).files
    assert source.config["model_type"] == "qwen2"
    assert source.shape.parameters == real_parameters["qwen2"]
    assert source.shape.linears["q_proj"][2] == 2  # one per layer
    assert source.seq_len == 256  # the model's context, under the default
    assert source.has_chat_template


def test_an_upload_is_found_only_among_its_owners_models(alice, bob, model_dirs, tmp_path):
    model = store_model(alice, upload_of(model_dirs["llama"], tmp_path), "")

    with pytest.raises(ModelUnavailable, match=f"no model {model.reference} among yours"):
        resolve_model_source(model.reference, owner=bob)
    assert resolve_model_source(model.reference).store_prefix == model.store_prefix  # the platform's own view
    with pytest.raises(ModelUnavailable, match="^There is no model model:999999\\.$"):
        resolve_model_source("model:999999")


def test_a_hub_id_in_the_platforms_cache_is_its_cached_snapshot(hf_home, model_dirs, real_parameters):
    snapshot = cache_repo(hf_home, "tiny-org/tiny-llama", model_dirs["llama"])

    source = resolve_model_source("tiny-org/tiny-llama")

    assert source.source == "hub" and source.reference == source.name == "tiny-org/tiny-llama"
    assert source.snapshot == snapshot
    assert source.location == f"store:hub/tiny-org--tiny-llama/{REVISION}"
    assert source.shape.parameters == real_parameters["llama"]
    assert source.config["model_type"] == "llama"


def test_a_hub_id_the_cache_lacks_says_to_upload_the_model_instead(hf_home, model_dirs):
    cache_repo(hf_home, "tiny-org/tiny-llama", model_dirs["llama"])

    with pytest.raises(ModelUnavailable) as missing:
        resolve_model_source("meta-llama/Llama-2-7b-hf")

    assert str(missing.value) == (
        "Model 'meta-llama/Llama-2-7b-hf' is a Hugging Face Hub id and isn't in this platform's Hugging Face cache; "
        "nothing is downloaded from the Hub. Upload the model folder (`starverse model upload DIR`, POST "
        "/api/v1/models/ or the Models page) and use its reference (model:<id>)."
    )


def test_a_cached_hub_model_that_cant_be_trained_says_why(hf_home, model_dirs, tmp_path):
    gpt2 = tmp_path / "gpt2"
    shutil.copytree(model_dirs["llama"], gpt2)
    (gpt2 / "config.json").write_text('{"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}')
    cache_repo(hf_home, "openai-community/gpt2", gpt2)

    with pytest.raises(ModelUnavailable, match="can't be trained: Unsupported model architecture 'gpt2'"):
        resolve_model_source("openai-community/gpt2")


@pytest.mark.parametrize("name", ["gpt-5", "model:", "model:²", "../../etc/passwd", "org/../name", ""])
def test_any_other_name_lists_what_would_do(name):
    with pytest.raises(ModelUnavailable, match="Use a built-in model \\(llama-tiny, "):
        resolve_model_source(name)


def test_a_hub_snapshot_is_stored_once_with_its_files_not_its_links(hf_home, model_dirs):
    cache_repo(hf_home, "tiny-org/tiny-llama", model_dirs["llama"])
    source = resolve_model_source("tiny-org/tiny-llama")
    assert keys("hub") == []  # resolving (quotes, launches) stores nothing

    store_hub_snapshot(source)

    manifest = read_manifest(platform_store(), source.store_prefix)
    assert set(manifest.files) == {path.name for path in model_dirs["llama"].iterdir()}
    weights = (model_dirs["llama"] / "model.safetensors").read_bytes()
    assert platform_store().get_bytes(f"{source.store_prefix}/model.safetensors") == weights
    stored_at = {item.key: item.modified for item in platform_store().list("hub")}
    store_hub_snapshot(resolve_model_source("tiny-org/tiny-llama"))
    assert {item.key: item.modified for item in platform_store().list("hub")} == stored_at  # not again


def test_a_catalog_or_uploaded_model_has_no_snapshot_to_store(alice, model_dirs, tmp_path):
    model = store_model(alice, upload_of(model_dirs["llama"], tmp_path), "")
    before = keys("")

    store_hub_snapshot(resolve_model_source("llama-tiny"))
    store_hub_snapshot(resolve_model_source(model.reference))

    assert keys("") == before
