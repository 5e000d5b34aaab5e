"""The Models page: the catalog and your uploads, the upload form with its errors, delete buttons."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.test import Client

from fleet.choices import JobStatus
from fleet.models import Job, UploadedModel
from tests.support.model_archives import member, pack, tar_with
from tests.support.stored import keys, own_store_url

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def own_store(settings, tmp_path) -> None:
    settings.STORAGE_URL = own_store_url(tmp_path)


@pytest.fixture(scope="module")
def page_archives(model_dirs, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("page-archives")
    return {
        "good": pack(model_dirs["llama"], root / "page-llama.tar.gz"),
        "pickle": tar_with(root / "pickle.tar.gz", model_dirs["llama"], member("pytorch_model.bin"), data=b"\x80."),
    }


@pytest.fixture
def browser(alice) -> Client:
    client = Client()
    client.force_login(alice)
    return client


def post_upload(browser: Client, archive: Path, name: str = ""):
    with open(archive, "rb") as file:
        return browser.post("/models/", {"file": file, "name": name}, follow=True)


def test_the_page_lists_the_catalog_and_is_in_the_navigation(browser):
    page = browser.get("/models/")

    assert page.status_code == 200
    html = page.content.decode()
    assert 'href="/models/" aria-current="page">Models</a>' in html
    assert "<code>llama-tiny</code>" in html and "You have no models yet." in html


def test_the_page_needs_a_login():
    assert Client().get("/models/")["Location"].startswith("/accounts/login/")


def test_an_upload_from_the_form_is_listed_with_its_reference(browser, alice, page_archives):
    page = post_upload(browser, page_archives["good"], name="From the page")

    model = UploadedModel.objects.get(owner=alice)
    html = page.content.decode()
    assert page.redirect_chain == [("/models/", 302)]
    assert f"Train it as {model.reference}." in html
    assert f'<code id="model-ref-{model.pk}">{model.reference}</code>' in html and "From the page" in html


def test_an_uploaded_model_has_a_train_on_it_button_that_opens_the_train_page_with_it_chosen(
    browser, alice, page_archives, catalog
):
    post_upload(browser, page_archives["good"], name="mine")
    model = UploadedModel.objects.get(owner=alice)
    html = browser.get("/models/").content.decode()
    link = f'href="/train/?model=model%3A{model.pk}">Train on it</a>'
    assert link in html and 'href="/train/?model=llama-tiny">Train it</a>' in html

    train = browser.get(f"/train/?model=model%3A{model.pk}").content.decode()

    assert f'<option value="{model.reference}" selected>' in train


def test_a_refused_upload_shows_why_in_the_form(browser, page_archives):
    page = post_upload(browser, page_archives["pickle"])

    assert page.status_code == 400
    assert "pytorch_model.bin" in page.content.decode() and "field-error" in page.content.decode()
    assert not UploadedModel.objects.exists() and keys("models") == []


def test_an_upload_over_the_limit_shows_the_limit_in_the_form(browser, page_archives, settings):
    settings.MODEL_MAX_BYTES = 5_000

    page = post_upload(browser, page_archives["good"])

    assert page.status_code == 413
    assert "the limit is 5,000 bytes" in page.content.decode()
    assert not UploadedModel.objects.exists()


def test_an_upload_needs_the_csrf_token(alice, page_archives):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)

    assert post_upload(client, page_archives["good"]).status_code == 403
    assert not UploadedModel.objects.exists()


def test_the_delete_button_deletes_ones_own_model_only(browser, bob, page_archives, django_capture_on_commit_callbacks):
    post_upload(browser, page_archives["good"])
    model = UploadedModel.objects.get()
    url = f"/models/{model.pk}/delete/"
    others = Client()
    others.force_login(bob)

    assert others.post(url).status_code == 404
    assert browser.post("/models/99999999999999999999999/delete/").status_code == 404
    with django_capture_on_commit_callbacks(execute=True):
        deleted = browser.post(url, HTTP_HX_REQUEST="true")

    assert deleted["HX-Redirect"] == "/models/"
    assert not UploadedModel.objects.exists() and keys(model.store_prefix) == []


def test_deleting_a_model_a_job_trains_says_which_job(browser, alice, page_archives):
    post_upload(browser, page_archives["good"])
    model = UploadedModel.objects.get()
    job = Job.objects.create(
        owner=alice, model_name=model.reference, per_device_batch_size=4, max_steps=10,
        max_budget_per_hour=28_000_000, status=JobStatus.QUEUED,
    )  # fmt: skip

    page = browser.post(f"/models/{model.pk}/delete/", follow=True)

    assert f"used by job {job.pk} (queued)" in page.content.decode()
    assert UploadedModel.objects.filter(pk=model.pk).exists()
