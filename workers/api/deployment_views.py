"""`/api/v1/deployments/`: serve a trained model behind the OpenAI-compatible gateway (docs/SERVING.md).

The view parses and answers; workers/services/deployments.py owns every rule (names, servable models, replica
bounds, budgets through the launch path) and says which field a refusal is about (`DeploymentRefused`).
"""

from __future__ import annotations

from django.db import IntegrityError
from django.db.models import Prefetch
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.exceptions import APIException, ErrorDetail, ValidationError
from rest_framework.response import Response

from base.api.docs import IDEMPOTENT_WRITE_ERRORS, READ_ERRORS, VALIDATION_EXAMPLE, ErrorSerializer, errors
from base.api.idempotency import IDEMPOTENCY_KEY_PARAMETER, idempotent
from base.api.validation import refuse_unknown_fields
from fleet.models import Deployment, Job
from workers.api import deployment_serializers as s
from workers.services.deployments import create_deployment, stop_deployment, update_replicas
from workers.services.replicas import LIVE_JOB, DeploymentRefused

# The service's names of a few fields, as the API's request calls them.
API_FIELDS = {
    "model_name": "model",
    "max_budget_per_hour": "max_budget",
    "spot_bid_per_hour": "spot_bid",
    "bid": "spot_bid",
    "chip_counts": "chip",
}


class DeploymentStopped(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "deployment_stopped"
    answer_with_code = True


def refusal(error: DeploymentRefused) -> APIException:
    """A refusal of the service as the API's error: a 400 naming the field, or 409 for a stopped deployment."""
    if error.code == "deployment_stopped":
        return DeploymentStopped(str(error), code=error.code)
    return ValidationError({API_FIELDS.get(error.field, error.field): [ErrorDetail(str(error), code=error.code)]})


STOPPED_CONFLICT = OpenApiResponse(ErrorSerializer, description="The deployment is stopped (`deployment_stopped`).")


@extend_schema_view(
    list=extend_schema(
        summary="List your deployments",
        description="Your deployments, newest first, paginated, stopped ones included; `?status=` and `?name=` filter.",
        parameters=[
            OpenApiParameter("status", str, description="deploying, ready, idle, stopped or failed"),
            OpenApiParameter("name", str, description="Only deployments of this name (one live one at most)"),
        ],
        responses={200: s.DeploymentSerializer(many=True), **errors(401, 429)},
    ),
    retrieve=extend_schema(
        summary="Get a deployment",
        description=(
            "Its status, the endpoint to call (an OpenAI client's `base_url` and the `model` to name, with your API "
            "token), its live replicas (job, engine state, engine, simulated, chip type), the requests and tokens "
            "served, the cost so far and the measured price per million tokens."
        ),
        responses={200: s.DeploymentSerializer, **errors(*READ_ERRORS)},
    ),
)
class DeploymentViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Deploy a trained model, follow it, scale it, stop it."""

    serializer_class = s.DeploymentSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Deployment.objects.none()
        replicas = Prefetch("replicas", queryset=Job.objects.filter(LIVE_JOB).order_by("pk"), to_attr="live_replicas")
        found = Deployment.objects.filter(owner=self.request.user).annotate(charged=s.charged_of_deployment())
        if self.action == "list":
            params = self.request.query_params
            found = found.filter(**{key: params[key] for key in ("status", "name") if params.get(key)})
        return found.prefetch_related(replicas)

    def answer(self, deployment: Deployment, code: int = status.HTTP_200_OK) -> Response:
        """The deployment as it is now in the database, with its cost and replicas read again."""
        fresh = self.get_queryset().get(pk=deployment.pk)
        return Response(s.DeploymentSerializer(fresh, context=self.get_serializer_context()).data, status=code)

    @extend_schema(
        summary="Deploy a model",
        description=(
            "Checks the name, the model (an upload `model:<id>`, a job's output `job:<id>` or a cached Hub model: "
            "the built-in catalog models are refused, `model_not_servable`), the chip and the replica bounds, then "
            "launches `min_replicas` replicas through the jobs' launch path: each is planned, holds credit, is "
            "placed and billed per second like a job (a replica is a job; the jobs list leaves them out). With "
            "`min_replicas` 0 none starts until the first request (status `idle`). A replica the launch refuses "
            "refuses the whole deployment. 400 names the field and a code: `name` (`invalid`, `name_taken`), "
            "`model` (`model_not_servable`, `model_unavailable`, `model_does_not_fit`), `chip` (`invalid`, "
            "`no_capacity`), `min_replicas`, `max_replicas`, `idle_timeout_s`, `max_budget` (`budget_too_low`), "
            "`total_budget` (`budget_too_low`), `balance` (`insufficient_credit`). Send an `Idempotency-Key` so "
            "that a retry can't deploy twice."
        ),
        request=s.DeploymentCreateSerializer,
        parameters=[IDEMPOTENCY_KEY_PARAMETER],
        responses={201: s.DeploymentSerializer, **errors(*IDEMPOTENT_WRITE_ERRORS)},
        examples=[VALIDATION_EXAMPLE],
    )
    @idempotent
    def create(self, request):
        asked = s.DeploymentCreateSerializer(data=request.data)
        refuse_unknown_fields(asked, read_only=[*s.DeploymentSerializer().fields, "owner"])
        asked.is_valid(raise_exception=True)
        try:
            deployment = create_deployment(request.user, **asked.service_arguments())
        except DeploymentRefused as error:
            raise refusal(error) from None
        except IntegrityError:  # the same name deployed at the same moment by another request
            taken = _("You already have a deployment named '%(name)s'.") % {"name": asked.validated_data["name"]}
            raise ValidationError({"name": [ErrorDetail(taken, code="name_taken")]}) from None
        return self.answer(deployment, status.HTTP_201_CREATED)

    @extend_schema(
        summary="Scale a deployment",
        description=(
            "New `min_replicas`, `max_replicas` or `idle_timeout_s` (what is left out stays). A raised minimum "
            "launches replicas now; a lowered maximum stops the surplus. 400 names the field; 409 "
            "`deployment_stopped` for a stopped deployment. Any other field is refused: deploy anew to change it."
        ),
        request=s.DeploymentUpdateSerializer,
        responses={200: s.DeploymentSerializer, 409: STOPPED_CONFLICT, **errors(400, *READ_ERRORS, 403)},
    )
    def partial_update(self, request, pk=None):
        deployment = self.get_object()
        asked = s.DeploymentUpdateSerializer(data=request.data)
        refuse_unknown_fields(asked)
        asked.is_valid(raise_exception=True)
        try:
            deployment = update_replicas(deployment, **asked.validated_data)
        except DeploymentRefused as error:
            raise refusal(error) from None
        return self.answer(deployment)

    @extend_schema(
        summary="Stop a deployment",
        description=(
            "Stops it for good: every replica is told to stop (its billing ends as it stops, as a cancelled job's) "
            "and the name is free again. Answers the stopped deployment; stopping a stopped one changes nothing."
        ),
        responses={200: s.DeploymentSerializer, **errors(*READ_ERRORS, 403)},
    )
    def destroy(self, request, pk=None):
        return self.answer(stop_deployment(self.get_object()))
