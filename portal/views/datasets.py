"""Uploading a dataset to train on, the list of one's datasets, and a preview of one in a model's tokens."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext
from django.views.decorators.csrf import csrf_exempt, csrf_protect

from base.uploads import refused_while_streaming
from fleet.models import Dataset
from portal.forms import DatasetUploadForm
from workers.services.datasets import (
    BYTE_LEVEL,
    PREVIEW_RECORDS,
    PREVIEW_TOKENS,
    DatasetRejected,
    DatasetTooLarge,
    DatasetUploadLimit,
    preview_dataset,
    preview_tokenizers,
    store_dataset,
)
from workers.services.storage import StorageUnavailable


@csrf_exempt  # checked by csrf_protect below, once the upload limit is in place
@login_required
def datasets(request: HttpRequest) -> HttpResponse:
    """The page; a POST uploads a dataset, refused as it streams in once it passes DATASET_MAX_BYTES."""
    if request.method == "POST":
        refused = refused_while_streaming(request, DatasetUploadLimit(request), DatasetTooLarge, DatasetUploadForm)
        if refused is not None:
            return page(request, refused, status=413)
    return upload_or_list(request)


@csrf_protect
def upload_or_list(request: HttpRequest) -> HttpResponse:
    """The upload form and list; with ?preview=<id>[&tokenizer=...], that dataset's first records tokenized."""
    form = DatasetUploadForm(request.POST, request.FILES) if request.method == "POST" else DatasetUploadForm()
    if request.method == "POST" and form.is_valid():
        upload = form.cleaned_data["file"]
        try:
            dataset = store_dataset(request.user, upload, name=form.cleaned_data["name"] or upload.name)
        except (DatasetRejected, StorageUnavailable) as error:
            form.add_error("file", str(error))
        else:
            messages.success(
                request,
                gettext("Stored “%(name)s”: %(samples)s samples. Train on it as %(reference)s.")
                % {"name": dataset.name, "samples": f"{dataset.samples:,}", "reference": dataset.reference},
            )
            return redirect("datasets")
    preview = _preview(request) if "preview" in request.GET else None
    status = 400 if form.errors or (preview and preview["error"]) else 200
    return page(request, form, status, preview)


def page(request: HttpRequest, form: DatasetUploadForm, status: int, preview: dict | None = None) -> HttpResponse:
    context = {"form": form, "datasets": Dataset.objects.filter(owner=request.user), "preview": preview}
    return render(request, "portal/training/datasets.html", context, status=status)


def _preview(request: HttpRequest) -> dict:
    """The preview section's context: one of the user's datasets, the tokenizer choices, the records."""
    pk = request.GET["preview"]
    if not (pk.isascii() and pk.isdigit() and len(pk) <= 18):  # int() refuses 4,300 digits and more
        raise Http404(gettext("No such dataset."))
    dataset = get_object_or_404(Dataset, pk=int(pk), owner=request.user)
    choice = request.GET.get("tokenizer", BYTE_LEVEL)
    try:
        records, error = preview_dataset(dataset, choice), ""
    except DatasetRejected as rejected:
        records, error = [], str(rejected)
    return {
        "dataset": dataset,
        "choices": [
            (value, gettext("byte-level (catalog models)") if value == BYTE_LEVEL else label)
            for value, label in preview_tokenizers(request.user)
        ],
        "choice": choice,
        "records": records,
        "error": error,
        "max_records": PREVIEW_RECORDS,
        "max_tokens": PREVIEW_TOKENS,
    }
