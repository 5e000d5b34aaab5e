"""What a job or a quote asks for, as the v1 API validates it (JobSpecSerializer), and a plan as the API shows it."""

from __future__ import annotations

import re
from decimal import Decimal

from django.conf import settings
from django.utils.translation import gettext as _
from rest_framework import serializers

from base.api.fields import MoneyInputField
from fleet.choices import Policy, TrainingMode
from fleet.models import ChipType, Dataset
from kernel.hyperparameters import Hyperparameters, resolve
from kernel.modelfiles.hfconfig import lora_settings
from kernel.money import format_amount, to_micros
from kernel.planner import Plan
from kernel.spec import JobSpec
from workers.api.hyperparameters import HyperparametersSerializer
from workers.api.tracking import TrackingSerializer
from workers.services.hyperparameters import origin_of_source
from workers.services.models import ModelUnavailable, resolve_model_source
from workers.services.tracking import seal

MONEY_KEYS = ("price_per_hour", "price_per_million_tokens", "total_cost")
UPLOAD_REFERENCE = re.compile(r"^upload:([0-9]{1,18})$")


def format_plan(plan: Plan | None) -> dict | None:
    """A plan as the API shows it: its JSON, with money as decimal strings (the API's money format)."""
    if not plan:
        return None
    return _money_as_decimals(plan.to_dict())


def _money_as_decimals(shown: dict) -> dict:
    """Money as decimal strings; a rank's node as the node's id (an integer), as the schema says."""
    shown = {
        key: format_amount(value) if key in MONEY_KEYS and value is not None else value for key, value in shown.items()
    }
    shown["ranks"] = [{**rank, "node_id": int(rank["node_id"])} for rank in shown.get("ranks", [])]
    if shown.get("baseline"):
        shown["baseline"] = _money_as_decimals(shown["baseline"])
    return shown


class LoraSerializer(serializers.Serializer):
    """A LoRA adapter's settings; what is left out takes the defaults shown."""

    r = serializers.IntegerField(min_value=1, max_value=256, default=8, help_text="The adapter's rank")
    alpha = serializers.IntegerField(min_value=1, max_value=4096, default=16, help_text="Scale: alpha / r")
    dropout = serializers.FloatField(min_value=0, max_value=0.5, default=0.05)
    target_modules = serializers.ListField(
        child=serializers.CharField(max_length=40),
        required=False,
        min_length=1,
        help_text="Linear layers to adapt by name (default: q/k/v/o_proj, gate/up/down_proj)",
    )


class JobSpecSerializer(serializers.Serializer):
    """What to train and under which policy and budget (shared by quotes and jobs)."""

    model = serializers.CharField(
        max_length=120,
        help_text="A catalog model (llama-tiny, llama-2-7b, llama-2-13b, llama-2-70b: trained from scratch) or the "
        "reference of a model you uploaded (model:<id>), a finished job's trained model (job:<id>: "
        "docs/FINE_TUNING.md); a Hugging Face Hub id only when it is in the platform's Hugging Face cache",
    )
    dataset = serializers.CharField(
        max_length=120, default="synthetic", help_text="'synthetic' or 'upload:<id>' of one of your datasets"
    )
    seq_len = serializers.IntegerField(
        min_value=8,
        max_value=32768,
        required=False,
        allow_null=True,
        help_text="Tokens per training sample (default: the model's, at most 2048)",
    )
    mode = serializers.ChoiceField(
        choices=TrainingMode.choices, default=TrainingMode.FULL, help_text="full: every weight; lora: an adapter"
    )
    lora = LoraSerializer(required=False, allow_null=True, help_text="LoRA settings (mode 'lora' only)")
    gradient_checkpointing = serializers.BooleanField(
        default=False, help_text="Recompute activations in the backward pass: less memory, about a third slower"
    )
    eval_dataset = serializers.CharField(
        max_length=120,
        required=False,
        allow_null=True,
        allow_blank=True,
        help_text="'upload:<id>' of one of your datasets to measure the held-out loss on",
    )
    eval_fraction = serializers.FloatField(
        min_value=0, max_value=0.5, default=0, help_text="Or hold out this fraction of the dataset's records"
    )
    eval_every = serializers.IntegerField(
        min_value=0, max_value=settings.JOB_MAX_STEPS, default=0, help_text="Steps between evals (0: at the end only)"
    )
    sync_mode = serializers.ChoiceField(
        choices=["step", "diloco"],
        required=False,
        allow_blank=True,
        default="",
        help_text="Islands (chips of several stacks): sync gradients every step, or diloco; blank: the planner's",
    )
    sync_every = serializers.IntegerField(
        min_value=1, max_value=10000, required=False, allow_null=True, help_text="diloco: inner steps between syncs"
    )
    hyperparameters = HyperparametersSerializer(
        required=False,
        allow_null=True,
        help_text="Learning rate and schedule, optimizer, clipping (docs/FINE_TUNING.md)",
    )
    tracking = TrackingSerializer(
        required=False,
        allow_null=True,
        help_text="Log the run to Weights & Biases and/or MLflow too (TensorBoard files are always written); "
        "the API key and token are stored encrypted and never shown (docs/FINE_TUNING.md, Tracking)",
    )
    per_device_batch_size = serializers.IntegerField(min_value=1, max_value=settings.JOB_MAX_BATCH)
    max_steps = serializers.IntegerField(
        min_value=1, max_value=settings.JOB_MAX_STEPS, required=False, help_text="Steps to train (or give n_epochs)"
    )
    n_epochs = serializers.FloatField(
        min_value=0.01,
        max_value=1000,
        required=False,
        allow_null=True,
        help_text="Or passes over your dataset: the steps come from its tokens and the planned global batch "
        "(the quote's `steps`)",
    )
    policy = serializers.ChoiceField(choices=Policy.choices, default=Policy.COST_PERFORMANCE)
    max_budget = MoneyInputField(max_value=Decimal("1000000"), help_text="Hourly cap, in currency units")
    total_budget = MoneyInputField(max_value=Decimal("100000000"), required=False, allow_null=True)
    chip_counts = serializers.DictField(
        child=serializers.IntegerField(min_value=0, max_value=4096),
        required=False,
        allow_null=True,
        help_text="Pick chips by hand: {chip slug: count}",
    )
    name = serializers.CharField(max_length=120, required=False, allow_blank=True, default="")
    spot = serializers.BooleanField(default=False, help_text="Run on spot chips (cheaper; may be reclaimed and moved)")
    bid = MoneyInputField(
        max_value=Decimal("1000000"),
        required=False,
        allow_null=True,
        help_text="Spot jobs: the most you pay per chip-hour, in currency units",
    )
    allow_on_demand = serializers.BooleanField(
        default=True, help_text="Spot jobs: may run on (or move to) on-demand chips when spot ones are short"
    )
    allow_other_chips = serializers.BooleanField(
        default=True, help_text="May move to other chip types when its chips are reclaimed"
    )

    def validate(self, data):
        self._validate_training(data)
        if data.get("n_epochs") and data.get("max_steps"):
            raise serializers.ValidationError({"n_epochs": [_("Give max_steps or n_epochs, not both.")]})
        if not data.get("n_epochs") and not data.get("max_steps"):
            raise serializers.ValidationError({"max_steps": [_("Give max_steps, or n_epochs over your dataset.")]})
        if data.get("n_epochs") and data.get("dataset", "synthetic") == "synthetic":
            raise serializers.ValidationError(
                {"n_epochs": [_("The synthetic dataset never ends: give max_steps, or train on a dataset of yours.")]}
            )
        if data.get("spot") and data.get("bid") is None:
            raise serializers.ValidationError({"bid": [_("A spot job needs a bid: the most it pays per chip-hour.")]})
        if not data.get("spot") and data.get("bid") is not None:
            raise serializers.ValidationError({"bid": [_("A bid only applies to spot jobs: set spot to true.")]})
        return data

    def _validate_training(self, data) -> None:
        """LoRA settings fit the mode and the model; an eval schedule has something to evaluate."""
        lora, source = data.get("lora"), self.context.get("model_source")
        context = source.config.get("max_position_embeddings") if source else None
        if data.get("seq_len") and isinstance(context, int) and data["seq_len"] > context:
            raise serializers.ValidationError(
                {
                    "seq_len": [
                        _("%(model)s reads at most %(tokens)s tokens (max_position_embeddings).")
                        % {"model": source.name, "tokens": context}
                    ]
                }
            )
        if data.get("mode") != TrainingMode.LORA:
            if lora:
                raise serializers.ValidationError({"lora": [_("LoRA settings apply only to mode 'lora'.")]})
        else:
            data["lora"] = lora_settings(lora)
            known = set(source.shape.linears) if source else set()
            unknown = sorted(set(data["lora"]["target_modules"]) - known)
            if source and unknown:
                raise serializers.ValidationError(
                    {
                        "lora": [
                            _("Unknown target module(s) %(unknown)s for %(model)s; its linear layers are %(known)s.")
                            % {"unknown": ", ".join(unknown), "model": source.name, "known": ", ".join(sorted(known))}
                        ]
                    }
                )
        if data.get("eval_dataset") and data.get("eval_fraction"):
            raise serializers.ValidationError(
                {"eval_fraction": [_("Give an eval dataset or a held-out fraction, not both.")]}
            )
        if data.get("sync_every") and data.get("sync_mode") != "diloco":
            raise serializers.ValidationError(
                {
                    "sync_every": [
                        _("sync_every applies to the diloco sync mode only: set sync_mode to 'diloco' as well.")
                    ]
                }
            )
        if data.get("eval_every") and not (data.get("eval_dataset") or data.get("eval_fraction")):
            raise serializers.ValidationError(
                {"eval_every": [_("Nothing to evaluate: give an eval_dataset or an eval_fraction.")]}
            )

    def validate_model(self, value: str) -> str:
        user = self.context["request"].user
        try:
            source = resolve_model_source(value.strip(), owner=user)
        except ModelUnavailable as error:
            raise serializers.ValidationError(str(error)) from None
        self.context["model_source"] = source
        return source.reference

    def validate_eval_dataset(self, value: str | None) -> str | None:
        if not value:
            return None
        return self._own_upload(value, "eval dataset")

    def validate_dataset(self, value: str) -> str:
        if value == "synthetic":
            return value
        return self._own_upload(value, "dataset")

    def _own_upload(self, value: str, what: str) -> str:
        user = self.context["request"].user
        # ASCII digits only: "²" and "٣" pass str.isdigit() but are no dataset id (int("²") raises).
        reference = UPLOAD_REFERENCE.match(value)
        if reference and Dataset.objects.filter(pk=int(reference[1]), owner=user).exists():
            return value
        if what == "dataset":
            raise serializers.ValidationError(
                _("Unknown dataset '%(value)s': use 'synthetic' or 'upload:<id>' of yours.") % {"value": value}
            )
        raise serializers.ValidationError(
            _("Unknown eval dataset '%(value)s': use 'upload:<id>' of one of your datasets.") % {"value": value}
        )

    def validate_chip_counts(self, value):
        if value is None:
            return None
        known = set(ChipType.objects.values_list("slug", flat=True))
        unknown = sorted(set(value) - known)
        if unknown:
            raise serializers.ValidationError(_("Unknown chip type(s): %(unknown)s.") % {"unknown": ", ".join(unknown)})
        picked = {slug: count for slug, count in value.items() if count > 0}
        if not picked:
            raise serializers.ValidationError(_("Pick at least one chip."))
        return picked

    def job_spec(self) -> JobSpec:
        """The validated spec, money in micro-units; call after is_valid()."""
        data = self.validated_data
        dataset = data["dataset"]
        return JobSpec(
            name=data.get("name", ""),
            model_name=data["model"],
            dataset=dataset,
            dataset_upload_id=int(dataset[7:]) if dataset.startswith("upload:") else None,
            per_device_batch_size=data["per_device_batch_size"],
            max_steps=data.get("max_steps") or 1,  # epochs: worked out at the launch (workers/services/epochs.py)
            n_epochs=data.get("n_epochs"),
            policy=data["policy"],
            max_budget_per_hour=to_micros(data["max_budget"]),
            total_budget=to_micros(data["total_budget"]) if data.get("total_budget") else None,
            chip_counts=data.get("chip_counts"),
            spot=data.get("spot", False),
            spot_bid_per_hour=to_micros(data["bid"]) if data.get("bid") is not None else None,
            allow_on_demand=data.get("allow_on_demand", True),
            allow_other_chips=data.get("allow_other_chips", True),
            seq_len=data.get("seq_len"),
            mode=data.get("mode", TrainingMode.FULL),
            lora=data.get("lora"),
            gradient_checkpointing=data.get("gradient_checkpointing", False),
            eval_dataset_upload_id=int(data["eval_dataset"][7:]) if data.get("eval_dataset") else None,
            eval_fraction=data.get("eval_fraction", 0.0),
            eval_every=data.get("eval_every", 0),
            sync_mode=data.get("sync_mode") or "",
            sync_every=data.get("sync_every"),
            hyperparameters=self._hyperparameters(data),
            tracking=seal(data.get("tracking")),
        )

    def _hyperparameters(self, data) -> dict:
        """The owner's settings with the job's defaults, which hang on the mode and the model."""
        given = Hyperparameters.from_dict(
            {k: v for k, v in (data.get("hyperparameters") or {}).items() if v is not None}
        )
        source = self.context["model_source"]
        origin, parameters = origin_of_source(source)
        return resolve(given, data.get("mode", TrainingMode.FULL), origin, parameters).as_dict()
