"""Validation of what agents send (a malformed message is a 400 naming the field)."""

from __future__ import annotations

import re

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from kernel.protocol import ADDRESS_AUTO, MAX_POLL_WAIT_S, ReportKind
from kernel.stacks import STACKS
from workers.api.client_address import parse_address

HOST_NAME = re.compile(
    r"^(?=.{1,120}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)


class DeviceSerializer(serializers.Serializer):
    index = serializers.IntegerField(min_value=0)
    name = serializers.CharField(max_length=120)
    memory_gib = serializers.FloatField(min_value=0, required=False)


class EnrollSerializer(serializers.Serializer):
    enrollment_token = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    # An enrolled host's agent re-enrolls itself with its current node token instead.
    node_token = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    hostname = serializers.RegexField(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,119}$", max_length=120)
    chip_type = serializers.SlugField(max_length=40)
    chips = serializers.IntegerField(min_value=1, max_value=64)
    simulated = serializers.BooleanField()
    spot_eligible = serializers.BooleanField(default=False)
    # Where other nodes' ranks reach this host: an IP address or a DNS name; blank or "auto": the address
    # the platform sees the enrollment (and later polls) come from.
    address = serializers.CharField(max_length=120, required=False, allow_blank=True, default="")
    agent_version = serializers.CharField(max_length=40, required=False, allow_blank=True, default="")
    devices = DeviceSerializer(many=True, required=False, default=list)
    # The stacks whose runtime the agent found on the host (kernel/stacks.py); absent from agents older
    # than the list, which ran CUDA only.
    runtimes = serializers.ListField(
        child=serializers.ChoiceField(choices=sorted(STACKS)), required=False, default=None, max_length=len(STACKS)
    )

    def validate_address(self, value: str) -> str:
        if value in ("", ADDRESS_AUTO):
            return ""
        address = None if "%" in value else parse_address(value)  # a zone index means nothing to other hosts
        if address is not None and not (address.is_unspecified or address.is_multicast):
            return str(address)
        # A DNS name; its last label is not all digits (that would be a malformed IPv4 address).
        if address is None and HOST_NAME.match(value) and not value.rsplit(".", 1)[-1].isdigit():
            return value.lower()
        raise serializers.ValidationError(
            f'Give an IP address other hosts can reach, a DNS name, or "{ADDRESS_AUTO}" '
            "(the address the platform sees this agent at)."
        )

    def validate(self, attrs):
        if not attrs["enrollment_token"] and not attrs["node_token"]:
            raise serializers.ValidationError(
                {"enrollment_token": ["Required, unless the host re-enrolls with its current node_token."]}, "required"
            )
        return attrs


@extend_schema_field(
    {
        "oneOf": [
            {"type": "integer"},
            {
                "type": "object",
                "properties": {"id": {"type": "integer"}, "error": {"type": "string"}},
                "required": ["id"],
            },
        ]
    }
)
class AckField(serializers.Field):
    """An ack is a command id, or {"id": ..., "error": "..."} for a refused command."""

    def to_internal_value(self, data):
        if isinstance(data, bool):
            raise serializers.ValidationError("An ack is a command id or {id, error}.")
        if isinstance(data, int):
            return {"id": data, "error": ""}
        if isinstance(data, dict) and isinstance(data.get("id"), int) and not isinstance(data.get("id"), bool):
            return {"id": data["id"], "error": str(data.get("error") or "")[:2000]}
        raise serializers.ValidationError("An ack is a command id or {id, error}.")

    def to_representation(self, value):
        return value


class RankStateSerializer(serializers.Serializer):
    job_id = serializers.IntegerField(min_value=1)
    epoch = serializers.IntegerField(min_value=0)
    rank = serializers.IntegerField(min_value=0)
    pid = serializers.IntegerField(required=False, allow_null=True)
    state = serializers.ChoiceField(choices=["starting", "running", "exited"])


class PollSerializer(serializers.Serializer):
    health = serializers.DictField(required=False, default=dict)
    acks = serializers.ListField(child=AckField(), required=False, default=list, max_length=1000)
    # Refused commands: their ids are in `acks` too; this says why.
    ack_errors = serializers.ListField(child=AckField(), required=False, default=list, max_length=1000)
    ranks = RankStateSerializer(many=True, required=False, default=list)
    wait_s = serializers.FloatField(min_value=0, max_value=MAX_POLL_WAIT_S, required=False, default=0)


class ReportItemSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(
        choices=[
            ReportKind.METRIC,
            ReportKind.LOG,
            ReportKind.CHECKPOINT,
            ReportKind.EVAL,
            ReportKind.EXIT,
            ReportKind.ISLAND,
            ReportKind.SERVING,
        ]
    )
    rank = serializers.IntegerField(min_value=0, max_value=4096)
    t = serializers.FloatField(required=False)
    step = serializers.IntegerField(min_value=0, required=False)
    loss = serializers.FloatField(required=False, allow_null=True)
    eval_loss = serializers.FloatField(required=False, allow_null=True)
    eval_tokens = serializers.IntegerField(min_value=0, required=False)
    tokens = serializers.IntegerField(min_value=0, required=False)
    tokens_total = serializers.IntegerField(min_value=0, required=False)
    tokens_per_s = serializers.FloatField(min_value=0, required=False)
    step_time_s = serializers.FloatField(min_value=0, required=False)
    samples_seen = serializers.IntegerField(min_value=0, required=False)
    memory_mb = serializers.FloatField(min_value=0, required=False)
    line = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    path = serializers.CharField(required=False, max_length=500)
    seconds = serializers.FloatField(required=False, allow_null=True)
    stopping = serializers.BooleanField(required=False, default=False)
    code = serializers.IntegerField(required=False)
    error = serializers.CharField(required=False, allow_blank=True, allow_null=True, trim_whitespace=False)
    # An island's leader (hosts/runtime/islands/): what changed, who takes part, what crossed the bridge.
    island = serializers.IntegerField(min_value=0, max_value=64, required=False)
    change = serializers.ChoiceField(choices=["joined", "members", "dropped", "sync"], required=False)
    members = serializers.ListField(
        child=serializers.IntegerField(min_value=0, max_value=64), required=False, max_length=64
    )
    syncs = serializers.IntegerField(min_value=0, required=False)
    round_step = serializers.IntegerField(min_value=0, required=False)  # a diloco sync: the step its round was sent at
    bytes_across = serializers.IntegerField(min_value=0, required=False)
    # The bridge the leader measured since its last report (its allreduce's effective Gbit/s); absent: none sent.
    bridge_gbps = serializers.FloatField(min_value=0, max_value=100_000, required=False)
    stack = serializers.CharField(required=False, max_length=40)
    mode = serializers.CharField(required=False, max_length=20)
    # A serving replica (hosts/serving/replica.py): its engine's state and where it answers.
    state = serializers.ChoiceField(choices=["starting", "ready", "draining", "stopped", "failed"], required=False)
    url = serializers.URLField(required=False, allow_blank=True, max_length=300)
    engine = serializers.CharField(required=False, allow_blank=True, max_length=40)
    simulated = serializers.BooleanField(required=False)
    device = serializers.CharField(required=False, allow_blank=True, max_length=40)

    REQUIRED = {
        ReportKind.METRIC: ("step", "loss"),
        ReportKind.LOG: ("line",),
        ReportKind.CHECKPOINT: ("step", "path"),
        ReportKind.EVAL: ("step", "eval_loss"),
        ReportKind.EXIT: ("code",),
        ReportKind.ISLAND: ("island", "change"),
        ReportKind.SERVING: ("state",),
    }

    def validate(self, attrs):
        missing = [name for name in self.REQUIRED[attrs["kind"]] if name not in attrs]
        if missing:
            raise serializers.ValidationError({name: f"Required for a {attrs['kind']} report." for name in missing})
        return attrs


class ReportSerializer(serializers.Serializer):
    job_id = serializers.IntegerField(min_value=1)
    epoch = serializers.IntegerField(min_value=0)
    items = ReportItemSerializer(many=True, allow_empty=False, max_length=5000)


class StorageRequestSerializer(serializers.Serializer):
    """A rank's request for storage URLs with its grant (kernel/protocol.py, section 4)."""

    SIGN, FINISH = ("GET", "PUT"), ("COMPLETE", "ABORT")

    method = serializers.ChoiceField(choices=[*SIGN, *FINISH])
    keys = serializers.ListField(
        child=serializers.CharField(max_length=1024, trim_whitespace=False), required=False, max_length=1000
    )
    sizes = serializers.DictField(child=serializers.IntegerField(min_value=0), required=False)
    key = serializers.CharField(max_length=1024, trim_whitespace=False, required=False)
    upload_id = serializers.CharField(max_length=1024, required=False)
    etags = serializers.ListField(child=serializers.CharField(max_length=200), required=False, max_length=10_000)

    def validate(self, attrs):
        needed = ("keys",) if attrs["method"] in self.SIGN else ("key", "upload_id")
        if attrs["method"] == "COMPLETE":
            needed += ("etags",)
        missing = {name: [f"Required for {attrs['method']}."] for name in needed if name not in attrs}
        if missing:
            raise serializers.ValidationError(missing, "required")
        if set(attrs.get("sizes") or {}) - set(attrs.get("keys") or []):
            raise serializers.ValidationError({"sizes": ["Sizes are given only for keys asked for."]}, "invalid")
        return attrs
