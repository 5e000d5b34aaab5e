"""OpenAPI descriptions of the jobs API's answers that are plain dicts in the code (plans, metrics)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample
from rest_framework import serializers

from base.api.fields import MoneyField


class RankDocSerializer(serializers.Serializer):
    chip = serializers.CharField(help_text="Chip type slug.")
    node_id = serializers.IntegerField()
    hostname = serializers.CharField()
    pool = serializers.CharField(required=False)
    micro_batch = serializers.IntegerField(help_text="Samples this rank trains per step.")
    mode = serializers.CharField(help_text="on_demand or spot.")
    tokens_per_s = serializers.FloatField()
    memory_gib = serializers.FloatField(required=False)
    simulated = serializers.BooleanField()


class BaselineDocSerializer(serializers.Serializer):
    policy = serializers.CharField()
    chip_counts = serializers.DictField(child=serializers.DictField(child=serializers.IntegerField()))
    tokens_per_s = serializers.FloatField()
    price_per_hour = MoneyField()
    eta_seconds = serializers.FloatField()
    total_cost = MoneyField()


class PlanDocSerializer(serializers.Serializer):
    """A plan: which chips, how fast, what it costs. Money is a decimal string in the platform currency."""

    policy = serializers.CharField()
    model = serializers.CharField()
    world_size = serializers.IntegerField(help_text="Ranks (chips) in the plan.")
    chip_counts = serializers.DictField(
        child=serializers.DictField(child=serializers.IntegerField()),
        help_text='{chip slug: {mode: chips}}, e.g. {"rtx-4090": {"on_demand": 1, "spot": 2}}',
    )
    ranks = RankDocSerializer(many=True)
    zero_stage = serializers.IntegerField()
    global_batch = serializers.IntegerField()
    tokens_per_step = serializers.IntegerField()
    step_seconds = serializers.FloatField()
    tokens_per_s = serializers.FloatField()
    price_per_hour = MoneyField(help_text="Currency per hour for all chips of the plan.")
    price_per_million_tokens = MoneyField()
    eta_seconds = serializers.FloatField(
        help_text="Estimated time from placement to done: max_steps, plus measured start-up and finishing."
    )
    total_cost = MoneyField(help_text="Estimated cost of the whole run.")
    overhead_seconds = serializers.FloatField(
        help_text="Of eta_seconds, the start-up and finishing measured on these nodes (0: not measured yet)."
    )
    uncertainty = serializers.FloatField(
        allow_null=True,
        help_text="How far the estimate may be off (0.1: ±10%), from what these nodes measured; "
        "null when some node has no measurement for this model yet (the speed is the chip's modelled figure).",
    )
    baseline = BaselineDocSerializer(allow_null=True, help_text="The best single-chip-type plan, to compare.")
    speedup_vs_baseline = serializers.FloatField(allow_null=True)
    cost_ratio_vs_baseline = serializers.FloatField(allow_null=True)


class StepDocSerializer(serializers.Serializer):
    step = serializers.IntegerField()
    loss = serializers.FloatField(allow_null=True)
    tokens_per_s = serializers.FloatField(allow_null=True)


class MetricsDocSerializer(serializers.Serializer):
    job = serializers.IntegerField()
    steps = serializers.ListField(child=serializers.DictField(), help_text="Per step: loss and tokens/s.")
    evals = serializers.ListField(
        child=serializers.DictField(), help_text="Every held-out loss so far: step, eval_loss, eval_tokens."
    )
    ranks = serializers.ListField(child=serializers.DictField(), help_text="Per rank: chip, micro-batch, tokens/s.")


class ArtifactDocSerializer(serializers.Serializer):
    path = serializers.CharField()
    kind = serializers.CharField(help_text="checkpoint, final model, ...")
    size_bytes = serializers.IntegerField()
    url = serializers.CharField(help_text="Download URL (same token).")


SPEC_EXAMPLE = OpenApiExample(
    "Train llama-tiny on the cheapest good mix",
    value={
        "model": "llama-tiny",
        "dataset": "synthetic",
        "per_device_batch_size": 4,
        "max_steps": 200,
        "policy": "cost-performance",
        "max_budget": "28",
    },
    request_only=True,
)

PLAN_EXAMPLE = OpenApiExample(
    "A mixed plan",
    value={
        "policy": "cost-performance",
        "model": "llama-tiny",
        "world_size": 3,
        "chip_counts": {"rtx-4090": {"on_demand": 1}, "tpu-v5e": {"spot": 1}, "ascend-910b": {"on_demand": 1}},
        "ranks": [],
        "zero_stage": 0,
        "global_batch": 12,
        "tokens_per_step": 3072,
        "step_seconds": 0.21,
        "tokens_per_s": 14628.5,
        "price_per_hour": "6.10",
        "price_per_million_tokens": "0.115",
        "eta_seconds": 42.0,
        "total_cost": "0.07",
        "baseline": None,
        "speedup_vs_baseline": None,
        "cost_ratio_vs_baseline": None,
    },
    response_only=True,
    status_codes=["200"],
)
