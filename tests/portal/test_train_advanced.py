"""The train page's Advanced section: epochs and hyperparameters reach the job as the API takes them, each
bad value is named beside its own box, and the quote shows the steps the epochs come to."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from fleet.models import Job
from tests.support.portal_pages import LAUNCH
from workers.services.datasets import store_dataset

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_scheduling", "own_store")]


def test_the_advanced_section_is_on_the_page_closed_until_used(alice_client, catalog):
    html = alice_client.get(reverse("train")).content.decode()
    assert 'data-testid="advanced"' in html and 'data-testid="advanced" open' not in html
    for name in ("hp_learning_rate", "hp_lr_scheduler", "hp_warmup_ratio", "hp_seed", "n_epochs"):
        assert f'name="{name}"' in html


def test_hyperparameters_from_the_page_reach_the_job(alice_client, alice, seeded_nodes_online):
    fields = {"hp_learning_rate": "0.001", "hp_lr_scheduler": "linear", "hp_warmup_steps": "4", "hp_seed": "9"}
    response = alice_client.post(reverse("train"), {**LAUNCH, **fields, "hp_train_on_inputs": "true"})
    assert response.status_code == 302, response.content.decode()[:2000]
    settings = Job.objects.get(owner=alice).hyperparameters
    assert (settings["learning_rate"], settings["lr_scheduler"], settings["warmup_steps"]) == (0.001, "linear", 4)
    assert (settings["seed"], settings["train_on_inputs"], settings["warmup_ratio"]) == (9, True, None)


def test_a_bad_hyperparameter_is_named_beside_its_box_and_the_section_stays_open(alice_client, seeded_nodes_online):
    response = alice_client.post(reverse("train"), {**LAUNCH, "hp_adam_beta2": "1.5"})
    html = response.content.decode()
    assert response.status_code == 200 and not Job.objects.exists()
    assert "Adam β2: Ensure this value is less than or equal to" in html
    assert 'data-testid="advanced" open' in html


def test_epochs_replace_the_steps_and_the_quote_shows_them(alice_client, alice, seeded_nodes_online):
    corpus = store_dataset(alice, SimpleUploadedFile("c.txt", b"a line of text to learn\n" * 300), name="c")
    quote = alice_client.post(reverse("train_quote"), {**LAUNCH, "dataset": corpus.reference, "n_epochs": "2"})
    assert quote.status_code == 200
    response = alice_client.post(reverse("train"), {**LAUNCH, "dataset": corpus.reference, "n_epochs": "2"})
    assert response.status_code == 302, response.content.decode()[:2000]
    job = Job.objects.get(owner=alice)
    assert job.n_epochs == 2 and job.max_steps == job.quote.steps != 200
    shown = quote.content.decode()
    assert f'data-testid="quote-steps">{job.max_steps} ' in shown and "· 2 epochs" in shown


def test_the_job_page_shows_the_recipe_the_run_uses(alice_client, alice, seeded_nodes_online):
    alice_client.post(reverse("train"), {**LAUNCH, "hp_learning_rate": "0.0005", "hp_max_grad_norm": "0"})
    job = Job.objects.get(owner=alice)
    html = alice_client.get(reverse("job", args=[job.pk])).content.decode()
    recipe = html[html.index('data-testid="job-recipe"') :]
    assert "<dt>Learning rate (peak)</dt><dd>0.0005</dd>" in recipe
    assert "<dt>Schedule</dt><dd>cosine</dd>" in recipe
    assert "<dt>Clip gradients at norm</dt><dd>never</dd>" in recipe
    assert "<dt>Warm-up</dt><dd>2 steps</dd>" in recipe  # 1% of 200 steps, from scratch
