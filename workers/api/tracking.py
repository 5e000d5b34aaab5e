"""The `tracking` object of a job: W&B and MLflow besides TensorBoard, each setting checked on its own so that
a bad value's 400 names it (`{"tracking": {"wandb": {"project": [...]}}}`). The secrets (W&B's api_key,
MLflow's token) are write-only: a job shows `api_key_set` / `token_set` instead (workers/services/tracking.py).
docs/FINE_TUNING.md, "Tracking", explains each setting."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from django.utils.translation import gettext as _
from rest_framework import serializers

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")  # a W&B project or entity


class _Strict(serializers.Serializer):
    """Unknown keys are a 400 naming the first of them."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(
                    {unknown[0]: [_("Unknown setting; known: %(known)s.") % {"known": ", ".join(self.fields)}]}
                )
        return super().to_internal_value(data)


class WandbSerializer(_Strict):
    project = serializers.RegexField(NAME, help_text="The W&B project the run is logged to")
    entity = serializers.RegexField(
        NAME, required=False, allow_null=True, help_text="The W&B team or user (default: the key's own)"
    )
    api_key = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        min_length=8,
        max_length=200,
        trim_whitespace=True,
        help_text="Secret: your W&B API key (needed online). Stored encrypted, never shown again: a job "
        "answers api_key_set instead",
        style={"input_type": "password"},
    )
    mode = serializers.ChoiceField(
        choices=["online", "offline"],
        default="online",
        help_text="online: sent to W&B as the run trains; offline: kept on the logging rank's host only",
    )

    def validate(self, data):
        if data.get("mode", "online") == "online" and not data.get("api_key"):
            raise serializers.ValidationError({"api_key": [_("An online W&B run needs your API key.")]})
        if any(ch.isspace() for ch in data.get("api_key") or ""):
            raise serializers.ValidationError({"api_key": [_("An API key has no spaces.")]})
        return data


class MlflowSerializer(_Strict):
    tracking_uri = serializers.CharField(
        max_length=500,
        help_text="Your MLflow tracking server, http(s)://… (reached from the training hosts); a file: or sqlite: "
        "URI is on the logging rank's host",
    )
    experiment = serializers.CharField(
        max_length=250, default="starverse", help_text="The experiment the run is logged under (made if missing)"
    )
    token = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        max_length=1000,
        help_text="Secret: a bearer token for the server (MLFLOW_TRACKING_TOKEN). Stored encrypted, never shown "
        "again: a job answers token_set instead",
        style={"input_type": "password"},
    )

    def validate_tracking_uri(self, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme in ("http", "https") and parts.hostname:
            return value
        if parts.scheme in ("file", "sqlite"):
            return value
        raise serializers.ValidationError(
            _("Give an http(s):// URL of your MLflow server (or a file: or sqlite: URI).")
        )


class TrackingSerializer(_Strict):
    """Where the run is logged besides its TensorBoard files (always written, downloadable at tensorboard/)."""

    wandb = WandbSerializer(required=False, allow_null=True, help_text="Weights & Biases")
    mlflow = MlflowSerializer(required=False, allow_null=True, help_text="MLflow")


PUBLIC_SCHEMA = {
    "type": "object",
    "description": "W&B and MLflow settings without their secrets: `wandb.api_key_set` and `mlflow.token_set` "
    "say whether one was given ({}: TensorBoard only)",
    "example": {"wandb": {"project": "llama-runs", "mode": "online", "api_key_set": True}},
}
