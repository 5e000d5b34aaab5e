"""Serializers of the v1 API."""

from __future__ import annotations

from rest_framework import serializers

from base.api.fields import MoneyField
from base.api.serializers import FieldsBuiltOnce
from billing.models import Entry
from fleet.models import Pool
from portal.models import ApiToken, TokenScope
from portal.models.tokens import DEFAULT_EXPIRY_DAYS, MAX_EXPIRY_DAYS


class ChipSerializer(serializers.Serializer):
    """A chip type, its specs and its prices now (per chip-hour)."""

    slug = serializers.CharField(source="chip.slug")
    name = serializers.CharField(source="chip.name")
    vendor = serializers.CharField(source="chip.vendor")
    family = serializers.CharField(source="chip.family")
    memory_gib = serializers.IntegerField(source="chip.memory_gib")
    bf16_tflops = serializers.DecimalField(source="chip.bf16_tflops", max_digits=8, decimal_places=1)
    memory_bandwidth_gbps = serializers.IntegerField(source="chip.memory_bandwidth_gbps")
    software_stack = serializers.CharField(source="chip.software_stack")
    default_mfu = serializers.DecimalField(source="chip.default_mfu", max_digits=4, decimal_places=3)
    on_demand_price = MoneyField(source="on_demand_per_hour")
    spot_price = MoneyField(source="spot_per_hour")
    on_demand_price_per_work_unit = serializers.SerializerMethodField()
    spot_price_per_work_unit = serializers.SerializerMethodField()
    capacity = serializers.IntegerField(help_text="Chips online: their host's agent is enrolled and heartbeating.")
    simulated_capacity = serializers.IntegerField(help_text="Of the chips online, those that are simulated.")
    free = serializers.IntegerField(help_text="Chips online and not held by a job now.")
    offline = serializers.IntegerField(help_text="Chips declared in a pool whose host has no agent online.")

    def get_on_demand_price_per_work_unit(self, offer) -> str | None:
        """Currency per RTX 4090-equivalent hour of delivered bf16 compute."""
        return MoneyField().to_representation(offer.per_work_unit(offer.on_demand_per_hour, self.context["reference"]))

    def get_spot_price_per_work_unit(self, offer) -> str | None:
        return MoneyField().to_representation(offer.per_work_unit(offer.spot_per_hour, self.context["reference"]))


class PoolSerializer(serializers.ModelSerializer):
    chip_type = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    nodes = serializers.IntegerField(source="node_count", read_only=True)
    chips = serializers.IntegerField(source="chip_total", read_only=True)
    simulated_chips = serializers.IntegerField(source="simulated_chip_total", read_only=True)

    class Meta:
        model = Pool
        fields = ["name", "chip_type", "zone", "nodes", "chips", "simulated_chips"]


class AccountSerializer(serializers.Serializer):
    username = serializers.CharField()
    email = serializers.EmailField()
    balance = MoneyField()
    currency = serializers.CharField()


class LedgerEntrySerializer(FieldsBuiltOnce, serializers.ModelSerializer):
    transaction = serializers.IntegerField(source="transaction_id")
    kind = serializers.CharField(source="transaction.kind")
    description = serializers.CharField(source="transaction.memo")
    amount = MoneyField()

    class Meta:
        model = Entry
        fields = ["id", "transaction", "kind", "description", "amount", "created_at"]


class TokenCreateSerializer(serializers.Serializer):
    username = serializers.CharField(help_text="Your username or e-mail address.")
    password = serializers.CharField(style={"input_type": "password"}, trim_whitespace=False)
    otp = serializers.CharField(
        max_length=64,
        required=False,
        help_text="With two-factor on: the code from your authenticator app, or one of your recovery codes.",
    )
    name = serializers.CharField(max_length=80, required=False, default="API token")
    scope = serializers.ChoiceField(choices=TokenScope.choices, required=False, default=TokenScope.READ_WRITE)
    expires_in_days = serializers.IntegerField(
        min_value=1,
        max_value=MAX_EXPIRY_DAYS,
        required=False,
        allow_null=True,
        default=DEFAULT_EXPIRY_DAYS,
        help_text=f"Days until the token stops working: {DEFAULT_EXPIRY_DAYS} unless given, null for never.",
    )


class TokenSerializer(serializers.ModelSerializer):
    active = serializers.BooleanField(source="is_active", read_only=True)

    class Meta:
        model = ApiToken
        fields = [
            "id",
            "name",
            "prefix",
            "scope",
            "created_at",
            "expires_at",
            "last_used_at",
            "revoked_at",
            "active",
        ]
        read_only_fields = fields


class NewTokenSerializer(TokenSerializer):
    token = serializers.CharField(help_text="The secret; shown only in this response.")

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "token"]
        read_only_fields = fields
