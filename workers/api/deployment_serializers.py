"""Deployments in the v1 API: what a create or a change asks for, and a deployment as the API shows it
(docs/SERVING.md). The rules (names, models, replica bounds, budgets) live in workers/services/deployments.py."""

from __future__ import annotations

from decimal import Decimal

from django.db.models import OuterRef, Subquery, Sum
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from base.api.fields import MoneyField, MoneyInputField
from base.api.serializers import FieldsBuiltOnce
from billing.models import BillingLine
from fleet.choices import Policy
from fleet.models import Deployment, Job
from kernel.money import format_amount, to_micros
from workers.services.deployments import (
    MAX_IDLE_TIMEOUT_S,
    MAX_REPLICAS,
    deployment_cost,
    price_per_million_tokens,
)
from workers.services.replicas import live_replicas

# Where the OpenAI-compatible routes are, on the site's own address (portal/urls.py includes openai_api at /v1/).
GATEWAY_PATH = "/v1"
MAX_CHIPS_PER_REPLICA = 64
MAX_MODEL_LEN = 1_048_576


def charged_of_deployment() -> Subquery:
    """What a deployment's replicas were charged, as a subquery on the outer query's pk (one query for a page).
    None for a deployment never billed."""
    lines = BillingLine.objects.filter(job__deployment=OuterRef("pk")).order_by()
    return Subquery(lines.values("job__deployment").annotate(total=Sum("charged_total")).values("total"))


class DeploymentCreateSerializer(serializers.Serializer):
    """A model to serve under a name, on which chips, within which budgets, by how many replicas."""

    name = serializers.CharField(
        max_length=64,
        help_text="What requests name as their `model`: 1 to 64 letters, digits, '.', '_' and '-', starting with a "
        "letter or digit; unique among your live deployments",
    )
    model = serializers.CharField(
        max_length=200,
        help_text="One of your uploaded models (model:<id>), a finished job's trained model (job:<id>) or a Hugging "
        "Face Hub id in the platform's cache; the built-in catalog models have no tokenizer and can't be served",
    )
    chip = serializers.CharField(
        max_length=40,
        required=False,
        allow_blank=True,
        default="",
        help_text="A chip type's slug; blank: the planner's",
    )
    chips_per_replica = serializers.IntegerField(
        min_value=1, max_value=MAX_CHIPS_PER_REPLICA, default=1, help_text="Chips of `chip` each replica runs on"
    )
    policy = serializers.ChoiceField(choices=Policy.choices, default=Policy.COST_PERFORMANCE)
    max_budget = MoneyInputField(max_value=Decimal("1000000"), help_text="Hourly cap per replica, in currency units")
    total_budget = MoneyInputField(
        max_value=Decimal("100000000"),
        required=False,
        allow_null=True,
        help_text="Every replica together, in currency units: the deployment stops when it is spent",
    )
    spot = serializers.BooleanField(default=False, help_text="Replicas on spot chips (cheaper; may be reclaimed)")
    spot_bid = MoneyInputField(
        max_value=Decimal("1000000"),
        required=False,
        allow_null=True,
        help_text="Spot replicas: the most you pay per chip-hour, in currency units",
    )
    min_replicas = serializers.IntegerField(
        min_value=0, max_value=MAX_REPLICAS, default=1, help_text="0: scale to zero when idle (a cold start on wake)"
    )
    max_replicas = serializers.IntegerField(min_value=1, max_value=MAX_REPLICAS, default=1)
    # The least idle timeout is the platform's setting (SERVING_MIN_IDLE_TIMEOUT_S, 30 s by default): the service
    # checks it, with the message that names it.
    idle_timeout_s = serializers.IntegerField(
        min_value=1,
        max_value=MAX_IDLE_TIMEOUT_S,
        default=300,
        help_text="Seconds without a request before scaling down to min_replicas (at least 30 by default)",
    )
    max_model_len = serializers.IntegerField(
        min_value=1,
        max_value=MAX_MODEL_LEN,
        required=False,
        allow_null=True,
        help_text="The longest request, prompt and answer, in tokens (default: the model's context)",
    )

    def validate(self, data):
        if data.get("spot") and data.get("spot_bid") is None:
            raise serializers.ValidationError(
                {"spot_bid": [_("Spot replicas need a bid: the most paid per chip-hour.")]}
            )
        if not data.get("spot") and data.get("spot_bid") is not None:
            raise serializers.ValidationError(
                {"spot_bid": [_("A bid only applies to spot replicas: set spot to true.")]}
            )
        if data.get("chips_per_replica", 1) > 1 and not data.get("chip"):
            raise serializers.ValidationError(
                {"chips_per_replica": [_("Several chips per replica need a `chip` type.")]}
            )
        return data

    def service_arguments(self) -> dict:
        """The validated request as create_deployment's keyword arguments, money in micro-units."""
        data = self.validated_data
        micros = {
            key: to_micros(data[key]) if data.get(key) is not None else None for key in ("total_budget", "spot_bid")
        }
        return {
            "name": data["name"],
            "model_name": data["model"],
            "max_budget_per_hour": to_micros(data["max_budget"]),
            "chip": data["chip"],
            "chips_per_replica": data["chips_per_replica"],
            "policy": data["policy"],
            "total_budget": micros["total_budget"],
            "spot": data["spot"],
            "spot_bid_per_hour": micros["spot_bid"],
            "min_replicas": data["min_replicas"],
            "max_replicas": data["max_replicas"],
            "idle_timeout_s": data["idle_timeout_s"],
            "max_model_len": data.get("max_model_len"),
        }


class DeploymentUpdateSerializer(serializers.Serializer):
    """What may change on a live deployment: its replica bounds and idle timeout (the rest: deploy anew)."""

    min_replicas = serializers.IntegerField(min_value=0, max_value=MAX_REPLICAS, required=False)
    max_replicas = serializers.IntegerField(min_value=1, max_value=MAX_REPLICAS, required=False)
    idle_timeout_s = serializers.IntegerField(min_value=1, max_value=MAX_IDLE_TIMEOUT_S, required=False)


class EndpointSerializer(serializers.Serializer):
    """Where to send requests: an OpenAI client's `base_url`, and the `model` to name (with your API token)."""

    base_url = serializers.CharField(help_text="The OpenAI-compatible base URL: <site>/v1")
    model = serializers.CharField(help_text="The deployment's name")


class ReplicaSerializer(serializers.ModelSerializer):
    """A replica: the job that serves, and what its engine last reported."""

    job = serializers.IntegerField(source="pk", help_text="The replica's job id (GET /api/v1/jobs/{id}/ for its log)")
    serving_state = serializers.SerializerMethodField(
        help_text="queued (no engine yet), starting, ready, failed or stopped"
    )
    engine = serializers.SerializerMethodField(help_text="vllm or transformers; '' before the engine reports")
    simulated = serializers.SerializerMethodField(help_text="On a simulated chip: it serves on the host's CPU")
    chip_type = serializers.SerializerMethodField(help_text="The chip type it is placed on; null before a placement")

    class Meta:
        model = Job
        fields = ["job", "status", "serving_state", "engine", "simulated", "chip_type", "started_at"]
        read_only_fields = fields

    def get_serving_state(self, job: Job) -> str:
        return job.serving.get("state", "")

    def get_engine(self, job: Job) -> str:
        return job.serving.get("engine", "")

    def get_simulated(self, job: Job) -> bool:
        return bool(job.serving.get("simulated", False))

    def get_chip_type(self, job: Job) -> str | None:
        return job.plan.ranks[0].chip if job.plan and job.plan.ranks else None


class DeploymentSerializer(FieldsBuiltOnce, serializers.ModelSerializer):
    """A deployment: its terms, where to call it, its replicas, what it served and what it cost."""

    model = serializers.CharField(source="model_name", read_only=True)
    max_budget = MoneyField(source="max_budget_per_hour")
    total_budget = MoneyField()
    spot_bid = MoneyField(source="spot_bid_per_hour")
    endpoint = serializers.SerializerMethodField()
    replicas = serializers.SerializerMethodField(help_text="The replicas that haven't ended, oldest first")
    cost = serializers.SerializerMethodField(help_text="Charged so far for every replica, in currency units")
    price_per_million_tokens = serializers.SerializerMethodField(
        help_text="The cost so far over the tokens served (prompt and completion), per million; null before any"
    )

    class Meta:
        model = Deployment
        fields = [
            "id", "name", "status", "status_reason", "model", "chip", "chips_per_replica", "policy", "max_budget",
            "total_budget", "spot", "spot_bid", "min_replicas", "max_replicas", "idle_timeout_s", "max_model_len",
            "endpoint", "replicas", "requests", "prompt_tokens", "completion_tokens", "cost",
            "price_per_million_tokens", "created_at", "last_request_at", "stopped_at",
        ]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(EndpointSerializer)
    def get_endpoint(self, deployment: Deployment) -> dict:
        request = self.context.get("request")
        base = request.build_absolute_uri(GATEWAY_PATH) if request else GATEWAY_PATH
        return {"base_url": base, "model": deployment.name}

    @extend_schema_field(ReplicaSerializer(many=True))
    def get_replicas(self, deployment: Deployment) -> list[dict]:
        # Prefetched by the API's queryset (workers/api/deployment_views.py), else read for this one deployment.
        jobs = getattr(deployment, "live_replicas", None)
        if jobs is None:
            jobs = live_replicas(deployment).order_by("pk")
        return ReplicaSerializer(jobs, many=True).data

    @extend_schema_field({"type": "string", "format": "decimal", "example": "0.42"})
    def get_cost(self, deployment: Deployment) -> str:
        return format_amount(self.charged(deployment))

    @extend_schema_field({"type": "string", "format": "decimal", "example": "1.25", "nullable": True})
    def get_price_per_million_tokens(self, deployment: Deployment) -> str | None:
        price = price_per_million_tokens(deployment, cost=self.charged(deployment))
        return None if price is None else format_amount(price)

    def charged(self, deployment: Deployment) -> int:
        # Annotated by the API's queryset (one query for a whole page), or asked for this one deployment.
        if hasattr(deployment, "charged"):
            return deployment.charged or 0
        return deployment_cost(deployment)
