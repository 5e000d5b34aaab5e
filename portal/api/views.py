"""REST API v1: catalog, account, ledger and API tokens."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from django.conf import settings
from django.db.models import Count, Q, Sum
from django.utils import timezone
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from base.api.docs import READ_ERRORS, VALIDATION_EXAMPLE, errors
from base.api.validation import refuse_unknown_fields
from base.prepared import PreparedPage, PreparedQuery
from billing.choices import AccountKind
from billing.models import Entry
from billing.services.ledger import balance_of
from billing.services.pricing import current_offers, reference_chip
from fleet.models import Pool
from portal.api import serializers
from portal.api.authentication import forget_token
from portal.api.sign_in import sign_in
from portal.api.throttling import ScopedThrottle
from portal.models import ApiToken
from portal.models.tokens import DEFAULT_EXPIRY_DAYS


class ChipListView(APIView):
    """Every chip type with its specs and current prices per chip-hour (public)."""

    permission_classes = [AllowAny]

    @extend_schema(
        summary="Chip types and prices",
        description=(
            "Every chip type with its specs, on-demand and spot price per chip-hour, the price per unit of "
            "delivered work (an RTX 4090-hour of bf16 compute), and the chips online now. No token needed."
        ),
        responses={200: serializers.ChipSerializer(many=True), **errors(429)},
        auth=[],
    )
    def get(self, request):
        return Response(chip_list())


_chips_memo: dict = {"at": float("-inf"), "data": None}
_chips_refresh = threading.Lock()


def chip_list() -> list:
    """The chip list as the API shows it; with API_CHIPS_CACHE_SECONDS set, kept that long per web process.

    Why: it is the API's dearest read (current_offers: six queries over prices, spot clearings, allocations
    and nodes) and the same for every caller. A second by default: under load most requests reuse the
    list, and its prices and free chips are at most that old (0 computes it every time, as the tests do).
    When the list is due, one thread of the process computes the next one while the others still answer
    the current one: under load, a due list was otherwise computed by every request that came in meanwhile.
    """
    seconds = settings.API_CHIPS_CACHE_SECONDS
    if seconds <= 0:
        return _chip_list_now()
    started = time.monotonic()
    if started - _chips_memo["at"] < seconds:
        return _chips_memo["data"]
    if not _chips_refresh.acquire(blocking=_chips_memo["data"] is None):
        return _chips_memo["data"]  # another thread is computing the next list
    try:
        if started - _chips_memo["at"] >= seconds:  # not done by the thread this one waited for
            _chips_memo.update(data=_chip_list_now(), at=started)
        return _chips_memo["data"]
    finally:
        _chips_refresh.release()


def _chip_list_now() -> list:
    offers = current_offers()
    return serializers.ChipSerializer(offers, many=True, context={"reference": reference_chip(offers)}).data


@extend_schema_view(
    list=extend_schema(
        summary="Pools",
        description="Pools of one chip type in one zone.",
        responses={200: serializers.PoolSerializer(many=True), **errors(429)},
        auth=[],
    ),
    retrieve=extend_schema(
        summary="A pool by name", responses={200: serializers.PoolSerializer, **errors(404, 429)}, auth=[]
    ),
)
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

    @extend_schema(
        summary="Your account and balance",
        responses={200: serializers.AccountSerializer, **errors(401, 429)},
        examples=[
            OpenApiExample(
                "An account",
                value={"username": "alice", "email": "alice@example.com", "balance": "96.25", "currency": "CNY"},
                response_only=True,
            )
        ],
    )
    def get(self, request):
        user = request.user
        data = {
            "username": user.get_username(),
            "email": user.email,
            "balance": balance_of(user),
            "currency": settings.CURRENCY,
        }
        return Response(serializers.AccountSerializer(data).data)


def ledger_of(owner: int):
    """The entries of a user's wallet, newest first, each with its transaction."""
    entries = Entry.objects.filter(account__owner=owner, account__kind=AccountKind.WALLET)
    return entries.select_related("transaction").order_by("-created_at", "-id")


LEDGER_PAGE = PreparedQuery(ledger_of, owner=int)  # the list page's query, compiled once


@extend_schema_view(
    list=extend_schema(
        summary="Your ledger",
        description="Every credit and debit of your wallet, newest first, paginated; amounts are signed.",
        responses={200: serializers.LedgerEntrySerializer(many=True), **errors(401, 429)},
    )
)
class LedgerViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """The entries of the signed-in user's wallet, newest first."""

    serializer_class = serializers.LedgerEntrySerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Entry.objects.none()
        return PreparedPage(LEDGER_PAGE, owner=self.request.user.pk)


@extend_schema_view(
    list=extend_schema(
        summary="Your API tokens",
        description="Name, prefix, scope, expiry and last use of your tokens; never the secrets.",
        responses={200: serializers.TokenSerializer(many=True), **errors(401, 429)},
    )
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
            return [ScopedThrottle()]
        return super().get_throttles()

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return ApiToken.objects.none()
        return ApiToken.objects.filter(user=self.request.user)

    @extend_schema(
        summary="Create an API token",
        description=(
            "Exchange a username (or e-mail) and password for a new API token; the secret is in this answer "
            "only. The same checks as the login page: failed attempts count toward its lockout (429 once "
            "locked), an account whose e-mail is not confirmed gets none (401, `code` email_unconfirmed), and "
            "an account with two-factor on needs `otp`, the code from its authenticator app or a recovery code "
            "(401, `code` two_factor_required without it, two_factor_invalid when wrong). `scope: read_only` "
            f"makes a token that can't write. A token expires after `expires_in_days` ({DEFAULT_EXPIRY_DAYS} "
            "unless given; `null` for one that never expires)."
        ),
        request=serializers.TokenCreateSerializer,
        responses={
            201: serializers.NewTokenSerializer,
            **errors(400, 401, 429),
        },
        examples=[
            OpenApiExample(
                "Create a token for the CLI",
                value={"username": "alice", "password": "…", "name": "laptop", "expires_in_days": 30},
                request_only=True,
            ),
            OpenApiExample(
                "With two-factor",
                value={"username": "alice", "password": "…", "otp": "123456"},
                request_only=True,
            ),
            OpenApiExample(
                "Two-factor code needed",
                value={"detail": "This account uses two-factor authentication: send …", "code": "two_factor_required"},
                response_only=True,
                status_codes=["401"],
            ),
            VALIDATION_EXAMPLE,
        ],
        auth=[],
    )
    def create(self, request):
        """Exchange a username (or e-mail) and password for a new API token, shown once."""
        form = serializers.TokenCreateSerializer(data=request.data)
        refuse_unknown_fields(form, read_only=serializers.NewTokenSerializer().fields)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        user = sign_in(request, data["username"], data["password"], data.get("otp"))
        days = data["expires_in_days"]
        token, raw = ApiToken.issue(
            user,
            name=data["name"],
            scope=data["scope"],
            expires_at=timezone.now() + timedelta(days=days) if days else None,
        )
        token.token = raw
        return Response(serializers.NewTokenSerializer(token).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Revoke a token",
        responses={204: OpenApiResponse(description="Revoked."), **errors(*READ_ERRORS, 403)},
    )
    def destroy(self, request, pk=None):
        """Revoke a token: it stops working at once (its cached lookup is dropped). Revoking twice is harmless."""
        token = self.get_object()
        token.revoke()
        forget_token(token)
        return Response(status=status.HTTP_204_NO_CONTENT)
