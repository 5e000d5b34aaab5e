"""GET /api/v1/usage/: the signed-in user's charged usage per job, chip type or day."""

from __future__ import annotations

from django.conf import settings
from django.urls import path
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from base.api.fields import MoneyField
from billing.services.statements import (
    Period,
    StatementError,
    UsageGroup,
    charges_for,
    check_period,
    total_of,
    usage_rows,
)


class UsageQuerySerializer(serializers.Serializer):
    group = serializers.ChoiceField(choices=UsageGroup.CHOICES, default=UsageGroup.JOB)
    since = serializers.DateField(required=False, help_text="First day, inclusive (YYYY-MM-DD).")
    until = serializers.DateField(required=False, help_text="Last day, inclusive (YYYY-MM-DD).")

    def validate(self, data: dict) -> dict:
        since, until = data.get("since"), data.get("until")
        if since and until and since > until:
            raise serializers.ValidationError(
                {
                    "since": [
                        _("The start date %(since)s is after the end date %(until)s.")
                        % {"since": since, "until": until}
                    ]
                }
            )
        return data


class UsageRowSerializer(serializers.Serializer):
    key = serializers.CharField(help_text="Job id, chip type slug or day (YYYY-MM-DD), by group.")
    label = serializers.CharField()
    seconds = serializers.IntegerField()
    chip_seconds = serializers.IntegerField()
    amount = MoneyField()


class UsageSerializer(serializers.Serializer):
    group = serializers.CharField()
    since = serializers.DateField(allow_null=True)
    until = serializers.DateField(allow_null=True)
    currency = serializers.CharField()
    total = MoneyField()
    rows = UsageRowSerializer(many=True)


class UsageView(APIView):
    """Charged usage of the signed-in user, grouped; a charge belongs to the day it ended."""

    @extend_schema(
        parameters=[UsageQuerySerializer],
        responses={200: UsageSerializer, 400: OpenApiResponse(description="Unknown group or a bad date range.")},
    )
    def get(self, request):
        query = UsageQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        params = query.validated_data
        period = Period(params.get("since"), params.get("until"))
        try:
            check_period(period)
        except StatementError as error:
            raise serializers.ValidationError({"since": [str(error)]}) from None
        rows = usage_rows(charges_for(request.user, period), params["group"])
        data = {
            "group": params["group"],
            "since": period.since,
            "until": period.until,
            "currency": settings.CURRENCY,
            "total": total_of(rows),
            "rows": rows,
        }
        return Response(UsageSerializer(data).data)


urlpatterns = [path("usage/", UsageView.as_view(), name="api-usage")]
