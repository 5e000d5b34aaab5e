"""The Models page: the built-in models and one's own Hugging Face models, with an upload form and delete buttons."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext, gettext_lazy
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect

from base.uploads import refused_while_streaming
from fleet.models import UploadedModel
from kernel.modelspecs import CATALOG
from workers.services.models import (
    ModelFileError,
    ModelInUse,
    ModelTooLarge,
    ModelUploadLimit,
    delete_model,
    store_model,
)
from workers.services.storage import StorageUnavailable


class ModelUploadForm(forms.Form):
    """An archive of a Hugging Face model folder; store_model checks its content."""

    # Empty files pass here so that store_model, shared with the API, says what is wrong.
    file = forms.FileField(
        label=gettext_lazy("Model archive"),
        allow_empty_file=True,
        widget=forms.ClearableFileInput(attrs={"accept": ".tar.gz,.tgz,.tar,.zip"}),
        help_text=gettext_lazy(
            "The model folder as .tar.gz, .tgz, .tar or .zip: config.json, safetensors weights, tokenizer."
        ),
    )
    name = forms.CharField(
        label=gettext_lazy("Name (optional)"),
        max_length=120,
        required=False,
        strip=True,
        help_text=gettext_lazy("Defaults to the archive's name."),
    )


# The built-in models' descriptions in the person's language (kernel.modelspecs.CATALOG says them in English).
DESCRIPTIONS = {
    "llama-tiny": gettext_lazy("A 0.2M-parameter Llama config, trained from scratch; runs on a CPU in seconds"),
    "llama-2-7b": gettext_lazy("The Llama 2 7B architecture, trained from scratch (no pretrained weights)"),
    "llama-2-13b": gettext_lazy("The Llama 2 13B architecture, trained from scratch (no pretrained weights)"),
    "llama-2-70b": gettext_lazy(
        "The Llama 2 70B architecture (grouped-query), trained from scratch (no pretrained weights)"
    ),
}


@csrf_exempt  # checked by csrf_protect below, once the upload limit is in place
@login_required
def models(request: HttpRequest) -> HttpResponse:
    """The page; a POST uploads a model, refused as it streams in once it passes MODEL_MAX_BYTES."""
    if request.method == "POST":
        refused = refused_while_streaming(request, ModelUploadLimit(request), ModelTooLarge, ModelUploadForm)
        if refused is not None:
            return page(request, refused, status=413)
    return upload_or_list(request)


@csrf_protect
def upload_or_list(request: HttpRequest) -> HttpResponse:
    form = ModelUploadForm(request.POST, request.FILES) if request.method == "POST" else ModelUploadForm()
    if request.method == "POST" and form.is_valid():
        upload = form.cleaned_data["file"]
        try:
            model = store_model(request.user, upload, form.cleaned_data["name"])
        except (ModelFileError, StorageUnavailable) as error:
            form.add_error("file", str(error))
        else:
            messages.success(
                request,
                gettext(
                    "Stored “%(name)s”: a %(architecture)s model of %(parameters)s parameters. "
                    "Train it as %(reference)s."
                )
                % {
                    "name": model.name,
                    "architecture": model.architecture,
                    "parameters": f"{model.parameters:,}",
                    "reference": model.reference,
                },
            )
            return redirect("models")
    return page(request, form, status=400 if form.errors else 200)


def page(request: HttpRequest, form: ModelUploadForm, status: int) -> HttpResponse:
    context = {
        "form": form,
        "catalog": [
            {"name": model.name, "config": model.config, "description": DESCRIPTIONS.get(model.name, model.description)}
            for model in CATALOG.values()
        ],
        "uploads": UploadedModel.objects.filter(owner=request.user),
    }
    return render(request, "portal/training/models.html", context, status=status)


@require_POST
@login_required
def model_delete(request: HttpRequest, pk: int) -> HttpResponse:
    model = get_object_or_404(UploadedModel, pk=pk, owner=request.user)
    try:
        delete_model(request.user, model)
    except ModelInUse as error:
        messages.error(request, str(error))
    else:
        messages.success(
            request, gettext("Deleted “%(name)s” (%(reference)s).") % {"name": model.name, "reference": model.reference}
        )
    return HttpResponseClientRedirect(reverse("models")) if request.htmx else redirect("models")
