"""The serving gateway: /v1/chat/completions, /v1/completions and /v1/models on a user's deployments
(docs/SERVING.md "The gateway").

A request's `model` is one of the caller's deployments by name. It is checked here (a JSON object, its
messages or prompt, a token limit the deployment can hold), sent to one of the deployment's ready replicas
(openai_api/gateway_proxy.py) and its answer passed back as the engine gave it, a stream chunk by chunk.
With no replica ready (scaled to zero, or starting) the request waits up to SERVING_COLD_START_TIMEOUT_S
for one, then is answered 503 with Retry-After. Every request is counted in flight while it runs (the
autoscaler reads that) and recorded with its tokens and timings once it is answered.

The hot path is one query (the deployment with its ready replicas) before the engine sees the request. The
in-flight count and the idle clock (`wake`, at most once a second) are done while the engine works on it,
and the record is written after the answer is sent.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone
from rest_framework import status
from rest_framework.authentication import SessionAuthentication
from rest_framework.response import Response
from rest_framework.settings import api_settings

from fleet.models import Deployment, DeploymentStatus
from openai_api.errors import SERVER_ERROR, OpenAIError, OpenAIView, invalid
from openai_api.gateway_answers import Tally, answer
from openai_api.gateway_proxy import open_upstream
from openai_api.objects import unix
from workers.services.deployments import owned_deployment, wake
from workers.services.replicas import Replica, ready_replicas, serving_deployment

ENGINE_PATHS = {"chat": "/chat/completions", "completions": "/completions"}
TOKEN_LIMITS = ("max_tokens", "max_completion_tokens")
# The idle clock (last_request_at) moves at most this often: scale-to-zero counts in tens of seconds at least.
WAKE_EVERY = timedelta(seconds=1)
POLL_S = 0.2
RETRY_AFTER_S = 10
NO_RETRY = {"x-should-retry": "false"}  # OpenAI's clients retry a 409 or 503 unless told not to


class GatewayView(OpenAIView):
    """A gateway route: the API token as a bearer, or the signed-in browser with its CSRF token (the
    playground)."""

    authentication_classes = [*api_settings.DEFAULT_AUTHENTICATION_CLASSES, SessionAuthentication]


class ModelsView(GatewayView):
    def get(self, request):
        deployments = Deployment.objects.filter(owner=request.user, status__in=DeploymentStatus.live())
        return Response({"object": "list", "data": [model_object(d, request.user) for d in deployments]})


class ModelView(GatewayView):
    def get(self, request, model: str):
        deployment = owned_deployment(request.user, model)
        if deployment is None or not deployment.is_live:
            raise model_not_found(model)
        return Response(model_object(deployment, request.user))


class CompletionsView(GatewayView):
    route = "completions"

    def post(self, request):
        return proxy(request, self.route)


class ChatCompletionsView(CompletionsView):
    route = "chat"


def model_object(deployment: Deployment, owner) -> dict:
    return {
        "id": deployment.name,
        "object": "model",
        "created": unix(deployment.created_at),
        "owned_by": owner.username,
    }


def proxy(request, route: str):
    """Check the request, find a ready replica (waiting through a cold start) and relay its answer."""
    started_at, clock = timezone.now(), request.clock  # set on its arrival (portal/logs.py)
    body = request_body(request, route)
    deployment, ready = deployment_named(request.user, body["model"])
    check_token_limits(body, deployment)
    stream = body.get("stream") is True
    payload = engine_payload(request.body, body, stream)
    tally = Tally(deployment, route, stream, started_at, clock)

    def meanwhile() -> None:
        """What need not delay the request, done while the engine works on it: counting it in flight, and
        moving the idle clock (at most once a second)."""
        tally.count_in_flight()
        if not deployment.last_request_at or started_at - deployment.last_request_at >= WAKE_EVERY:
            wake(deployment, started_at)

    try:
        replicas = ready or through_cold_start(deployment, started_at, tally)
        return answer(open_upstream(replicas, ENGINE_PATHS[route], payload, meanwhile), tally)
    except BaseException as error:
        tally.status_code = getattr(error, "status_code", status.HTTP_500_INTERNAL_SERVER_ERROR)
        tally.finish()
        raise


# -- the request ---------------------------------------------------------------------------------------
def request_body(request, route: str) -> dict:
    """The body as a JSON object, with what the route needs; any other field is the engine's to judge."""
    try:
        body = json.loads(request.body)
    except (ValueError, RecursionError):
        body = None
    if not isinstance(body, dict):
        raise invalid(None, "The request body must be a JSON object.", code="invalid_json")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise invalid(
            "model", "Name the model: one of your deployments, by its name.", code="missing_required_parameter"
        )
    if route == "chat" and not (isinstance(body.get("messages"), list) and body["messages"]):
        raise invalid("messages", "messages must be a non-empty list of messages.")
    if route == "completions" and body.get("prompt") is None:
        raise invalid("prompt", "prompt is required.", code="missing_required_parameter")
    for param in TOKEN_LIMITS:
        value = body.get(param)
        if value is not None and (type(value) is not int or value < 1):
            raise invalid(param, f"{param} must be a positive integer, not {json.dumps(value)}.", code="invalid_value")
    if body.get("stream") is not None and not isinstance(body["stream"], bool):
        raise invalid("stream", "stream must be true or false.", code="invalid_type")
    if body.get("stream_options") is not None and not isinstance(body["stream_options"], dict):
        raise invalid("stream_options", "stream_options must be an object.", code="invalid_type")
    return body


def check_token_limits(body: dict, deployment: Deployment) -> None:
    """A token limit past the deployment's context length (transformers serve would generate past it)."""
    most = deployment.max_model_len
    for param in TOKEN_LIMITS:
        if most and (body.get(param) or 0) > most:
            raise invalid(
                param,
                f"{param} is too large: {body[param]}. This model's context length is {most} tokens, "
                "prompt and answer together.",
                code="invalid_value",
            )


def engine_payload(raw: bytes, body: dict, stream: bool) -> bytes:
    """What the engine gets: the body as sent, a stream asking for its usage too (to count its tokens)."""
    if not stream:
        return raw
    body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
    return json.dumps(body).encode()


# -- the deployment and its replicas -------------------------------------------------------------------
def deployment_named(user, name: str) -> tuple[Deployment, list[Replica]]:
    """The user's live deployment of that name and its ready replicas."""
    found = serving_deployment(user, name)
    if found is None:
        stopped = Deployment.objects.filter(owner=user, name=name, status=DeploymentStatus.STOPPED)
        reason = stopped.order_by("-stopped_at").values_list("status_reason", flat=True).first()
        if reason is not None:
            raise OpenAIError(
                f"Deployment '{name}' is stopped ({reason or 'no reason given'}): deploy it again to serve it.",
                param="model",
                code="deployment_stopped",
                status_code=status.HTTP_409_CONFLICT,
                headers=NO_RETRY,
            )
        raise model_not_found(name)
    refuse_unless_live(found[0])
    return found


def model_not_found(name: str) -> OpenAIError:
    return OpenAIError(
        f"The model `{name}` does not exist or you do not have access to it.",
        param="model",
        code="model_not_found",
        status_code=status.HTTP_404_NOT_FOUND,
    )


def refuse_unless_live(deployment: Deployment) -> None:
    if deployment.status == DeploymentStatus.FAILED:
        raise OpenAIError(
            f"Deployment '{deployment.name}' has failed: {deployment.status_reason or 'its replicas could not start'}",
            param="model",
            code="deployment_failed",
            status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
            kind=SERVER_ERROR,
            headers=NO_RETRY,
        )
    if deployment.status == DeploymentStatus.STOPPED:
        raise OpenAIError(
            f"Deployment '{deployment.name}' is stopped: {deployment.status_reason or 'deploy it again'}",
            param="model",
            code="deployment_stopped",
            status_code=status.HTTP_409_CONFLICT,
            headers=NO_RETRY,
        )


def through_cold_start(deployment: Deployment, now: datetime, tally: Tally) -> list[Replica]:
    """With no replica ready: start one (`wake`) and wait for it, the request counted in flight meanwhile (that
    keeps the deployment awake)."""
    tally.count_in_flight()
    tally.cold_start = True
    wake(deployment, now)  # with no replica running, this starts one
    return wait_for_replicas(deployment)


def wait_for_replicas(deployment: Deployment) -> list[Replica]:
    timeout_s = float(settings.SERVING_COLD_START_TIMEOUT_S)
    deadline = time.monotonic() + timeout_s
    woken = time.monotonic()
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(POLL_S, left))
        if replicas := ready_replicas(deployment):
            return replicas
        deployment.refresh_from_db(fields=["status", "status_reason"])
        refuse_unless_live(deployment)
        if time.monotonic() - woken >= WAKE_EVERY.total_seconds():  # still wanted: the idle clock starts again
            wake(deployment)
            woken = time.monotonic()
    raise OpenAIError(
        f"Deployment '{deployment.name}' has no replica ready yet: one is starting (waited {timeout_s:g} s). "
        "Try again shortly.",
        code="model_not_ready",
        status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
        kind=SERVER_ERROR,
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )
