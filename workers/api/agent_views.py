"""The agent side of the API: enroll, long-poll for commands, report what ranks said.

These sync views answer on the main site; a long-poll holds a web thread while it waits. Large
fleets talk to the async agent service instead (workers/agent_service/, docs/OPERATIONS.md), which
gives the same answers through the same workers.services.agent_endpoints.
"""

from __future__ import annotations

import time

import structlog
from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from workers.api.agent_auth import IsNode, NodeTokenAuthentication
from workers.api.agent_serializers import (
    EnrollSerializer,
    PollSerializer,
    ReportSerializer,
    StorageRequestSerializer,
)
from workers.api.client_address import seen_address
from workers.services import agent_endpoints, channel
from workers.services.node_lifecycle import record_heartbeat


class AgentView(APIView):
    authentication_classes = [NodeTokenAuthentication]
    permission_classes = [IsNode]
    throttle_classes: list = []

    def initial(self, request, *args, **kwargs):
        """Once the node is known, every log line of this request names it (portal.logs)."""
        super().initial(request, *args, **kwargs)
        structlog.contextvars.bind_contextvars(node_id=request.auth.pk)


class EnrollView(APIView):
    """A compute host joins a pool with the operator's enrollment token and gets a node token."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(request=EnrollSerializer, responses={201: dict}, tags=["agent"])
    def post(self, request):
        form = EnrollSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        seen = seen_address(request)
        if not form.validated_data["address"] and not seen:
            raise ValidationError(
                {"address": ["The platform can't tell this host's address from the request: declare it (--address)."]},
                "address_unknown",
            )
        answer, body = agent_endpoints.enroll(form.validated_data, seen or "")
        return Response(body, status=answer)


class PollView(AgentView):
    """Heartbeat and long-poll: answers at once when commands are pending, else when one arrives."""

    @extend_schema(request=PollSerializer, responses={200: dict}, tags=["agent"])
    def post(self, request):
        form = PollSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        node = request.auth
        commands = agent_endpoints.start_poll(
            node,
            form.validated_data,
            ranks_sent="ranks" in request.data,
            seen_address=seen_address(request),
            heartbeat=_heartbeat_now,
        )
        wait_s = min(form.validated_data["wait_s"], settings.AGENT_POLL_WAIT_S)
        deadline = time.monotonic() + wait_s
        while not commands and time.monotonic() < deadline:
            channel.wait_for_wake(node.pk, max(1, round(deadline - time.monotonic())))
            commands = agent_endpoints.pending_commands(node.pk)
        return Response(agent_endpoints.poll_answer(node, commands))


class ReportView(AgentView):
    """Metrics, logs, checkpoints and exits of this node's ranks; 409 when the epoch is stale."""

    @extend_schema(request=ReportSerializer, responses={200: dict, 409: dict}, tags=["agent"])
    def post(self, request):
        form = ReportSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        structlog.contextvars.bind_contextvars(job_id=data["job_id"], epoch=data["epoch"])
        answer, body = agent_endpoints.report(request.auth, data)
        return Response(body, status=answer)


class StorageView(APIView):
    """URLs for one placement's objects, for a rank that holds the placement's storage grant (the grant is the
    credential: ranks have no node token, and hosts no store credentials)."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_classes: list = []

    @extend_schema(request=StorageRequestSerializer, responses={200: dict, 403: dict, 409: dict}, tags=["agent"])
    def post(self, request):
        token = agent_endpoints.grant_token(request.META.get("HTTP_AUTHORIZATION", ""))
        if token is None:
            return Response(agent_endpoints.NO_GRANT, status=401, headers={"WWW-Authenticate": "Bearer"})
        form = StorageRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        answer, body = agent_endpoints.storage(token, form.validated_data)
        return Response(body, status=answer)


def _heartbeat_now(node, health: dict, ranks: list, seen: str | None) -> None:
    """The sync view writes each poll's heartbeat at once (node_lifecycle.record_heartbeat)."""
    record_heartbeat(node, health, ranks, seen_address=seen)
