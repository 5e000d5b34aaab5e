"""The agent side of the API: enroll, long-poll for commands, report what ranks said."""

from __future__ import annotations

import time

import structlog
from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from workers.api.agent_auth import IsNode, NodeTokenAuthentication
from workers.api.agent_serializers import EnrollSerializer, PollSerializer, ReportSerializer
from workers.api.client_address import seen_address
from workers.choices import CommandStatus
from workers.models import AgentCommand
from workers.services import channel
from workers.services.fleet import EnrollmentError, enroll_node, record_heartbeat
from workers.services.reports import ReportRejected, StaleEpoch, accept_report
from workers.services.restarts import move_jobs_of_vanished_ranks


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
        try:
            enrolled = enroll_node(**form.validated_data, seen_address=seen or "")
        except EnrollmentError as error:
            return Response({"detail": str(error), "code": error.code}, status=status.HTTP_403_FORBIDDEN)
        node = enrolled.node
        return Response(
            {
                "node_id": node.pk,
                "node_token": enrolled.token,
                "pool": node.pool.name,
                "chip_type": node.pool.chip_type.slug,
                "poll_timeout_s": settings.AGENT_POLL_WAIT_S,
                "heartbeat_deadline_s": settings.AGENT_HEARTBEAT_DEADLINE_S,
                "address": node.address,
                "address_source": "observed" if node.address_observed else "declared",
            },
            status=status.HTTP_201_CREATED,
        )


class PollView(AgentView):
    """Heartbeat and long-poll: answers at once when commands are pending, else when one arrives."""

    @extend_schema(request=PollSerializer, responses={200: dict}, tags=["agent"])
    def post(self, request):
        form = PollSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        node = request.auth
        # Acks first: a node coming back from being lost is in service again once its kills are acked.
        _record_acks(node, form.validated_data["acks"], form.validated_data["ack_errors"])
        if "ranks" in request.data:  # ranks it acked starting and no longer lists died with an earlier agent
            move_jobs_of_vanished_ranks(node, form.validated_data["ranks"])
        record_heartbeat(
            node, form.validated_data["health"], form.validated_data["ranks"], seen_address=seen_address(request)
        )
        commands = _pending(node)
        wait_s = min(form.validated_data["wait_s"], settings.AGENT_POLL_WAIT_S)
        deadline = time.monotonic() + wait_s
        while not commands and time.monotonic() < deadline:
            channel.wait_for_wake(node.pk, max(1, round(deadline - time.monotonic())))
            commands = _pending(node)
        return Response({"commands": commands, "server_time": timezone.now().timestamp(), "address": node.address})


class ReportView(AgentView):
    """Metrics, logs, checkpoints and exits of this node's ranks; 409 when the epoch is stale."""

    @extend_schema(request=ReportSerializer, responses={200: dict, 409: dict}, tags=["agent"])
    def post(self, request):
        form = ReportSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        structlog.contextvars.bind_contextvars(job_id=data["job_id"], epoch=data["epoch"])
        try:
            accepted = accept_report(request.auth, data["job_id"], data["epoch"], data["items"])
        except StaleEpoch as error:
            return Response({"detail": str(error)}, status=status.HTTP_409_CONFLICT)
        except ReportRejected as error:
            return Response({"detail": str(error)}, status=status.HTTP_400_BAD_REQUEST)
        return Response({"accepted": accepted})


def _pending(node) -> list[dict]:
    return [c.as_message() for c in AgentCommand.objects.filter(node=node, status=CommandStatus.PENDING)]


def _record_acks(node, acks: list[dict], ack_errors: list[dict]) -> None:
    now = timezone.now()
    errors = {ack["id"]: ack["error"] for ack in ack_errors if ack["error"]}
    for ack in acks:
        ack = {"id": ack["id"], "error": ack["error"] or errors.get(ack["id"], "")}
        outcome = CommandStatus.REFUSED if ack["error"] else CommandStatus.DONE
        AgentCommand.objects.filter(node=node, pk=ack["id"], status=CommandStatus.PENDING).update(
            status=outcome, error=ack["error"], acked_at=now
        )
