"""What users upload for jobs to use: datasets ('upload:<id>') and their own Hugging Face models ('model:<id>')."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from fleet.choices import DatasetKind


class UploadedModel(models.Model):
    """A model folder (config.json, safetensors weights, tokenizer) checked at upload and kept in object storage.

    The folder is a tree under `store_prefix` (models/<owner id>/<uuid>; kernel/storage/trees.py). `config`
    is its config.json and `shape` the exact parameter count and linear layers
    (kernel.modelfiles.hfconfig.ModelShape.as_dict()) that planning needs, so neither reads the stored files.
    """

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="uploaded_models")
    name = models.CharField(max_length=120)
    architecture = models.CharField(max_length=40, help_text=_("config.json's model_type, e.g. llama"))
    parameters = models.PositiveBigIntegerField()
    size_bytes = models.PositiveBigIntegerField()
    config = models.JSONField()
    shape = models.JSONField()
    has_chat_template = models.BooleanField(default=False)
    store_prefix = models.CharField(max_length=255, unique=True, help_text=_("The model's tree in object storage"))
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "workers_uploadedmodel"  # its table from before the move
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


class Dataset(models.Model):
    """A user's uploaded text or JSONL corpus, validated at upload and kept in object storage.

    The file is a tree of one file, `<store_prefix>/<file_name>` (datasets/<owner id>/<uuid>/data.txt or
    data.jsonl: the suffix keeps the kind the upload was read as), with its manifest beside it.
    """

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=120)
    kind = models.CharField(max_length=16, choices=DatasetKind.choices)
    store_prefix = models.CharField(max_length=255, unique=True, help_text=_("The dataset's tree in object storage"))
    file_name = models.CharField(max_length=40, help_text=_("The file in the tree: data.txt or data.jsonl"))
    sha256 = models.CharField(max_length=64)
    size_bytes = models.PositiveBigIntegerField()
    samples = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "workers_dataset"  # its table from before the move
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name

    @property
    def reference(self) -> str:
        return f"upload:{self.pk}"

    @property
    def key(self) -> str:
        """The file's storage key."""
        return f"{self.store_prefix}/{self.file_name}"

    @property
    def location(self) -> str:
        """How a launch names the file: store:<key> (hosts/runtime/staging.py)."""
        return f"store:{self.key}"
