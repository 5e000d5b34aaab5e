"""The market API's serializers: bids and the moves a change would make, spot prices, bid advice."""

from __future__ import annotations

from decimal import Decimal

from django.utils.translation import gettext
from rest_framework import serializers

from base.api.fields import MoneyField, MoneyInputField
from base.api.serializers import FieldsBuiltOnce
from billing.models import SpotPrice
from fleet.models import ChipType, Job
from market.models import Bid

PRICE = {"max_value": Decimal("1000000")}
CONFIRM_HELP = (
    "Set true to make a change that moves your running job off its spot chips; without it such a change is "
    "refused with 409 (`code` confirm_required) saying where the job would go."
)


class BidSerializer(FieldsBuiltOnce, serializers.ModelSerializer):
    chip = serializers.SlugRelatedField(source="chip_type", slug_field="slug", read_only=True)
    max_price = MoneyField(source="max_price_per_hour", help_text="Most paid per chip-hour, in currency units")
    clearing_price = MoneyField(help_text="The last clearing price of this chip type for this bid")
    job = serializers.PrimaryKeyRelatedField(read_only=True)
    reserved_charge = MoneyField(
        help_text="Charged so far for chips the bid won that its job didn't hold yet: they are billed from the "
        "moment they are won (the spot price each second) until the job holds them or the bid stops winning them"
    )
    reserved_since = serializers.DateTimeField(
        read_only=True,
        allow_null=True,
        help_text="Since when chips won and not yet held are kept and billed for this bid (charged when that ends)",
    )

    class Meta:
        model = Bid
        fields = [
            "id",
            "job",
            "chip",
            "chips",
            "max_price",
            "status",
            "won_chips",
            "clearing_price",
            "reserved_charge",
            "reserved_since",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class BidResultSerializer(BidSerializer):
    warnings = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text="Accepted, but worth knowing: e.g. the bid is above the chip type's on-demand price",
    )

    class Meta(BidSerializer.Meta):
        fields = [*BidSerializer.Meta.fields, "warnings"]
        read_only_fields = fields


class MoveSerializer(serializers.Serializer):
    bid = serializers.IntegerField()
    job = serializers.IntegerField()
    chip = serializers.CharField()
    chips_lost = serializers.IntegerField(help_text="Spot chips the job would lose (any loss moves the whole job)")
    chips_held = serializers.IntegerField()
    to = serializers.CharField(allow_null=True, help_text='Where it would be re-planned now: "1 × TPU v5e (on-demand)"')
    price_per_hour_now = MoneyField()
    price_per_hour_after = MoneyField()


class ConfirmRequiredSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="What the change would do, in one sentence")
    code = serializers.CharField(help_text="confirm_required")
    move = MoveSerializer()


class BidCreateSerializer(serializers.Serializer):
    job = serializers.IntegerField(min_value=1, help_text="One of your jobs that hasn't finished")
    chip = serializers.SlugField(help_text="Chip type slug, e.g. rtx-4090")
    chips = serializers.IntegerField(min_value=1, max_value=4096)
    max_price = MoneyInputField(**PRICE, help_text="Most you pay per chip-hour, in currency units")

    def validate_job(self, value: int) -> Job:
        job = Job.objects.filter(pk=value, owner=self.context["request"].user).first()
        if job is None:
            raise serializers.ValidationError(gettext("Job %(id)s not found.") % {"id": value})
        return job

    def validate_chip(self, value: str) -> ChipType:
        chip = ChipType.objects.filter(slug=value).first()
        if chip is None:
            known = ", ".join(ChipType.objects.values_list("slug", flat=True))
            raise serializers.ValidationError(
                gettext("Unknown chip type '%(chip)s'; known: %(known)s.") % {"chip": value, "known": known}
            )
        return chip


class BidChangeSerializer(serializers.Serializer):
    chips = serializers.IntegerField(min_value=1, max_value=4096, required=False)
    max_price = MoneyInputField(**PRICE, required=False, help_text="New most-per-chip-hour: raise or lower")
    confirm = serializers.BooleanField(required=False, default=False, help_text=CONFIRM_HELP)

    def validate(self, data):
        if "chips" not in data and "max_price" not in data:
            raise serializers.ValidationError({"max_price": [gettext("Send max_price and/or chips to change.")]})
        return data


class CancelSerializer(serializers.Serializer):
    confirm = serializers.BooleanField(required=False, default=False, help_text=CONFIRM_HELP)


class SpotPriceSerializer(serializers.ModelSerializer):
    chip = serializers.SlugRelatedField(source="chip_type", slug_field="slug", read_only=True)
    price_per_hour = MoneyField()
    floor_per_hour = MoneyField()

    class Meta:
        model = SpotPrice
        fields = ["chip", "at", "price_per_hour", "floor_per_hour", "capacity", "demand", "allocated"]
        read_only_fields = fields


class AdvicePointSerializer(serializers.Serializer):
    bid = MoneyField(help_text="A bid, per chip-hour")
    expected_hours = serializers.FloatField(allow_null=True, help_text="Mean uninterrupted hours at this bid")
    winning_share = serializers.FloatField(allow_null=True, help_text="Share of the history this bid was winning")


class AdviceSerializer(serializers.Serializer):
    chip = serializers.CharField()
    bid = MoneyField(help_text="The bid advised on (null when none was given)")
    spot_price = MoneyField(help_text="The clearing price now, per chip-hour")
    floor = MoneyField(help_text="The spot floor: no bid below it is accepted")
    on_demand_price = MoneyField(help_text="The on-demand price per chip-hour of this chip type")
    expected_hours = serializers.FloatField(
        allow_null=True,
        help_text="Mean length, in hours, of the runs of history where the clearing price stayed at or below the "
        "bid: how long the bid would be expected to keep its chips (null: no history)",
    )
    winning_share = serializers.FloatField(allow_null=True, help_text="Share (0-1) of the history the bid would win")
    runs = serializers.IntegerField(help_text="Separate winning runs in the history")
    winning_now = serializers.BooleanField(help_text="The clearing price now is at or below the bid")
    history_hours = serializers.FloatField(help_text="How much price history the advice rests on, in hours")
    days = serializers.FloatField(help_text="The window looked at, in days")
    summary = serializers.CharField(help_text='In words, or "No history yet"')
    warnings = serializers.ListField(child=serializers.CharField(), help_text="e.g. the bid is above on-demand")
    curve = AdvicePointSerializer(many=True, help_text="Expected uninterrupted hours against bid, cheapest first")
