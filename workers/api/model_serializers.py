"""How the v1 API shows models: the built-in catalog and a user's uploads, in one shape."""

from __future__ import annotations

from rest_framework import serializers

from fleet.models import UploadedModel
from kernel.modelspecs import CATALOG, spec_from_config
from workers.services.models import ModelSource


class ModelEntrySerializer(serializers.Serializer):
    """One model a job can name by its `reference`: built in, uploaded, or in the platform's Hugging Face cache."""

    id = serializers.IntegerField(allow_null=True, help_text="Uploads only; null for the others.")
    reference = serializers.CharField(help_text="What a job's `model` field takes: llama-tiny, model:7, org/name.")
    name = serializers.CharField()
    source = serializers.ChoiceField(choices=["catalog", "upload", "hub"])
    description = serializers.CharField()
    architecture = serializers.CharField(help_text="config.json's model_type: llama, mistral, qwen2.")
    parameters = serializers.IntegerField()
    size_bytes = serializers.IntegerField(allow_null=True, help_text="Uploads only.")
    has_chat_template = serializers.BooleanField()
    created_at = serializers.DateTimeField(allow_null=True, help_text="Uploads only.")


class UploadedModelSerializer(serializers.ModelSerializer):
    """An upload as an entry of the list (and the answer to an upload)."""

    reference = serializers.CharField(read_only=True)
    source = serializers.SerializerMethodField()
    description = serializers.SerializerMethodField()

    class Meta:
        model = UploadedModel
        fields = [
            "id", "reference", "name", "source", "description", "architecture", "parameters", "size_bytes",
            "has_chat_template", "created_at",
        ]  # fmt: skip
        read_only_fields = fields

    def get_source(self, model: UploadedModel) -> str:
        return "upload"

    def get_description(self, model: UploadedModel) -> str:
        return f"Your {model.architecture} model, {model.parameters:,} parameters"


class UploadedModelDetailSerializer(UploadedModelSerializer):
    """One upload with its config.json and shape (exact parameters, linear layers)."""

    class Meta(UploadedModelSerializer.Meta):
        fields = [*UploadedModelSerializer.Meta.fields, "config", "shape"]
        read_only_fields = fields


def catalog_entries() -> list[dict]:
    """The built-in models (their parameter counts from the planner's shape, without building them)."""
    return [
        {
            "id": None,
            "reference": model.name,
            "name": model.name,
            "source": "catalog",
            "description": model.description,
            "architecture": model.config["model_type"],
            "parameters": spec_from_config(model.name, model.config, model.seq_len).parameters,
            "size_bytes": None,
            "has_chat_template": False,
            "created_at": None,
        }
        for model in CATALOG.values()
    ]


def source_entry(source: ModelSource) -> dict:
    """A resolved catalog or Hub model as an entry of the list."""
    return {
        "id": None,
        "reference": source.reference,
        "name": source.name,
        "source": source.source,
        "description": source.description,
        "architecture": source.config.get("model_type", ""),
        "parameters": source.shape.parameters,
        "size_bytes": None,
        "has_chat_template": source.has_chat_template,
        "created_at": None,
    }
