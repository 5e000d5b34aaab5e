"""A user's own Hugging Face model: an uploaded, checked model folder that jobs name as 'model:<id>'."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class UploadedModel(models.Model):
    """A model folder (config.json, safetensors weights, tokenizer) checked at upload and kept in object storage.

    The folder is a tree under `store_prefix` (models/<owner id>/<uuid>; kernel/storage/trees.py). `config`
    is its config.json and `shape` the exact parameter count and linear layers
    (kernel.modelfiles.hfconfig.ModelShape.as_dict()) that planning needs, so neither reads the stored files.
    """

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="uploaded_models")
    name = models.CharField(max_length=120)
    architecture = models.CharField(max_length=40, help_text="config.json's model_type, e.g. llama")
    parameters = models.PositiveBigIntegerField()
    size_bytes = models.PositiveBigIntegerField()
    config = models.JSONField()
    shape = models.JSONField()
    has_chat_template = models.BooleanField(default=False)
    store_prefix = models.CharField(max_length=255, unique=True, help_text="The model's tree in object storage")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name

    @property
    def reference(self) -> str:
        """How a job names this model."""
        return f"model:{self.pk}"

    @property
    def location(self) -> str:
        """How a launch names the folder: store:<prefix> (hosts/runtime/staging.py)."""
        return f"store:{self.store_prefix}"
