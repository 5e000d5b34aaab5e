"""The datasets page through Django's test client: uploads, refusals, and the launch page offering them."""

from __future__ import annotations

from html import unescape

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from fleet.models import Dataset

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_scheduling", "own_store")]


# Datasets


def upload(client, name: str, content: bytes):
    return client.post(reverse("datasets"), {"file": SimpleUploadedFile(name, content), "name": ""})


def test_uploading_a_text_dataset_lists_its_reference(alice_client, alice):
    response = upload(alice_client, "poems.txt", b"roses are red\nviolets are blue\n")
    dataset = Dataset.objects.get(owner=alice)
    assert response.status_code == 302
    assert (dataset.name, dataset.samples) == ("poems.txt", 2)
    html = alice_client.get(reverse("datasets")).content.decode()
    assert f"upload:{dataset.pk}" in html
    assert f"{reverse('train')}?dataset=upload%3A{dataset.pk}" in html


def test_an_empty_dataset_is_refused_naming_the_problem(alice_client):
    html = upload(alice_client, "empty.txt", b"").content.decode()
    assert "File: Dataset is empty." in html
    assert not Dataset.objects.exists()


def test_a_binary_dataset_is_refused_naming_the_problem(alice_client):
    html = upload(alice_client, "weights.txt", b"\x00\x01\x02binary").content.decode()
    assert "File: Dataset looks binary" in html
    assert not Dataset.objects.exists()


def test_the_upload_form_lists_every_kind_of_dataset_it_takes(alice_client):
    help_text = unescape(alice_client.get(reverse("datasets")).content.decode()).split('id="id_file_helptext">')[1]

    for kind in ("plain text", "{“text”}", "{“messages”: [{“role”, “content”}, …]}", "{“prompt”, “completion”}"):
        assert kind in help_text.split("</p>")[0]


def test_my_datasets_are_offered_on_the_launch_page(alice_client, alice, catalog):
    upload(alice_client, "corpus.jsonl", b'{"text": "hello"}\n')
    dataset = Dataset.objects.get(owner=alice)
    html = alice_client.get(reverse("train"), {"dataset": dataset.reference}).content.decode()
    assert f'<option value="{dataset.reference}" selected>' in html
