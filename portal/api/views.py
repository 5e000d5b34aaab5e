"""REST API v1: catalog, account, ledger and API tokens."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth import authenticate
from django.db.models import Count, Q, Sum
from django.utils import timezone
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from billing.choices import AccountKind
from billing.models import Entry
from billing.services.ledger import balance_of
from billing.services.pricing import current_offers, reference_chip
from portal.api import serializers
from portal.models import ApiToken
from workers.models import Pool


class ChipListView(APIView):
    """Every chip type with its specs and current prices per chip-hour (public)."""

    permission_classes = [AllowAny]

    @extend_schema(responses=serializers.ChipSerializer(many=True))
    def get(self, request):
        offers = current_offers()
        context = {"reference": reference_chip(offers)}
        return Response(serializers.ChipSerializer(offers, many=True, context=context).data)


class PoolViewSet(viewsets.ReadOnlyModelViewSet):
    """Pools of one chip type in one zone, with their node and chip counts (public)."""

    permission_classes = [AllowAny]
    serializer_class = serializers.PoolSerializer
    lookup_field = "name"
    queryset = (
        Pool.objects.select_related("chip_type")
        .annotate(
            node_count=Count("nodes"),
            chip_total=Sum("nodes__chips", default=0),
            simulated_chip_total=Sum("nodes__chips", filter=Q(nodes__simulated=True), default=0),
        )
        .order_by("chip_type__sort_order", "zone")
    )


class AccountView(APIView):
    """The signed-in user's account and wallet balance."""

    @extend_schema(responses=serializers.AccountSerializer)
    def get(self, request):
        user = request.user
        data = {
            "username": user.get_username(),
            "email": user.email,
            "balance": balance_of(user),
            "currency": settings.CURRENCY,
        }
        return Response(serializers.AccountSerializer(data).data)


class LedgerViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """The entries of the signed-in user's wallet, newest first."""

    serializer_class = serializers.LedgerEntrySerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Entry.objects.none()
        return (
            Entry.objects.filter(account__owner=self.request.user, account__kind=AccountKind.WALLET)
            .select_related("transaction")
            .order_by("-created_at", "-id")
        )


class TokenViewSet(mixins.ListModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet):
    """Create a token with a username and password; list and revoke your tokens with one."""

    serializer_class = serializers.TokenSerializer

    def get_permissions(self):
        if self.action == "create":
            return [AllowAny()]
        return super().get_permissions()

    def get_throttles(self):
        if self.action == "create":
            self.throttle_scope = "token_create"
            return [ScopedRateThrottle()]
        return super().get_throttles()

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return ApiToken.objects.none()
        return ApiToken.objects.filter(user=self.request.user)

    @extend_schema(
        request=serializers.TokenCreateSerializer,
        responses={
            201: serializers.NewTokenSerializer,
            400: OpenApiResponse(description="A field is missing or invalid."),
            401: OpenApiResponse(description="Invalid username or password."),
        },
        examples=[OpenApiExample("Create a token", value={"username": "alice", "password": "…"}, request_only=True)],
        auth=[],
    )
    def create(self, request):
        """Exchange a username (or e-mail) and password for a new API token, shown once."""
        form = serializers.TokenCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        user = authenticate(request._request, username=data["username"], password=data["password"])
        if user is None or not user.is_active:
            raise AuthenticationFailed("Invalid username or password.")
        days = data.get("expires_in_days")
        token, raw = ApiToken.issue(
            user,
            name=data["name"],
            scope=data["scope"],
            expires_at=timezone.now() + timedelta(days=days) if days else None,
        )
        token.token = raw
        return Response(serializers.NewTokenSerializer(token).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={204: None})
    def destroy(self, request, pk=None):
        """Revoke a token: it stops working at once. Revoking twice is harmless."""
        self.get_object().revoke()
        return Response(status=status.HTTP_204_NO_CONTENT)
