"""The `hyperparameters` object of a job or a quote: each setting checked on its own, so a bad value's
400 names it (`{"hyperparameters": {"learning_rate": [...]}}`). The defaults and the schedule are
kernel.hyperparameters'; docs/FINE_TUNING.md explains each setting."""

from __future__ import annotations

from django.utils.translation import gettext as _
from rest_framework import serializers

from kernel.hyperparameters import SCHEDULERS


class HyperparametersSerializer(serializers.Serializer):
    """How the optimizer steps; what is left out takes the job's default (docs/FINE_TUNING.md)."""

    learning_rate = serializers.FloatField(
        required=False,
        allow_null=True,
        min_value=1e-9,
        max_value=1.0,
        help_text="Peak learning rate (default: 2e-4 for LoRA, 2e-5 for a full fine-tune of a pretrained model, "
        "3e-3 down to 1e-4 by size for a model trained from scratch)",
    )
    lr_scheduler = serializers.ChoiceField(
        choices=SCHEDULERS,
        required=False,
        help_text="After warm-up: stay at the peak, or decay linearly or "
        "along a cosine to min_lr_ratio x peak at the last step (default cosine)",
    )
    warmup_ratio = serializers.FloatField(
        required=False, allow_null=True, min_value=0, max_value=0.5, help_text="Warm-up as a share of the steps"
    )
    warmup_steps = serializers.IntegerField(
        required=False, allow_null=True, min_value=0, max_value=1_000_000, help_text="Or warm-up in steps"
    )
    min_lr_ratio = serializers.FloatField(required=False, min_value=0, max_value=1, help_text="Default 0.1")
    weight_decay = serializers.FloatField(
        required=False, allow_null=True, min_value=0, max_value=1, help_text="AdamW's decoupled weight decay"
    )
    adam_beta1 = serializers.FloatField(required=False, min_value=0, max_value=0.999999, help_text="Default 0.9")
    adam_beta2 = serializers.FloatField(required=False, min_value=0, max_value=0.999999, help_text="Default 0.95")
    adam_epsilon = serializers.FloatField(required=False, min_value=1e-12, max_value=1e-3, help_text="Default 1e-8")
    max_grad_norm = serializers.FloatField(
        required=False, min_value=0, max_value=1e6, help_text="Clip the gradient's global norm (0: never; default 1)"
    )
    train_on_inputs = serializers.BooleanField(
        required=False, help_text="Chat and prompt data: the loss counts the prompts' tokens too (default false)"
    )
    checkpoint_every = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=1_000_000,
        help_text="Steps between checkpoints (default: a tenth of the run, between 10 and 200)",
    )

    seed = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=2**31 - 1,
        help_text="Initial weights, data order and dropout (default: the job's id); the same seed, data and "
        "chips train the same weights",
    )

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(
                    {unknown[0]: [_("Unknown hyperparameter; known: %(known)s.") % {"known": ", ".join(self.fields)}]}
                )
        return super().to_internal_value(data)

    def validate(self, data):
        if data.get("warmup_ratio") is not None and data.get("warmup_steps") is not None:
            raise serializers.ValidationError({"warmup_steps": [_("Give warmup_ratio or warmup_steps, not both.")]})
        return data
