"""Uploading a text or JSONL corpus to train on, and the list of one's datasets."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from portal.forms import DatasetUploadForm
from workers.models import Dataset
from workers.services.datasets import DatasetRejected, store_dataset


@login_required
def datasets(request: HttpRequest) -> HttpResponse:
    form = DatasetUploadForm(request.POST, request.FILES) if request.method == "POST" else DatasetUploadForm()
    if request.method == "POST" and form.is_valid():
        upload = form.cleaned_data["file"]
        try:
            dataset = store_dataset(request.user, upload, name=form.cleaned_data["name"] or upload.name)
        except DatasetRejected as error:
            form.add_error("file", str(error))
        else:
            messages.success(
                request,
                f"Stored “{dataset.name}”: {dataset.samples:,} samples. Train on it as {dataset.reference}.",
            )
            return redirect("datasets")
    context = {"form": form, "datasets": Dataset.objects.filter(owner=request.user)}
    return render(request, "portal/training/datasets.html", context)
