"""`Idempotency-Key` on POSTs that spend money or start work (docs/RELIABILITY.md #5).

A client that retries a request with the same key gets the first answer back, marked with
`Idempotent-Replayed: true`, instead of a second job, top-up or bid.

How: the handler runs inside one transaction that first takes a PostgreSQL advisory lock on
(user, key). Concurrent duplicates wait on that lock; once the first commits, its stored answer
is there for them to replay. The effect and the stored answer commit together, so a crash leaves
neither behind. Only successful (2xx) answers are stored: a refused request (bad input, too little
credit) can be fixed and sent again under the same key. The same key with a different method,
path or body is a 422 that names the header. Keys are remembered for 24 hours.

Use it on a DRF handler method:

    @extend_schema(parameters=[IDEMPOTENCY_KEY_PARAMETER], ...)
    @idempotent
    def create(self, request): ...
"""

from __future__ import annotations

import functools
import hashlib
import json
import re

from django.db import OperationalError, connection, transaction
from django.utils import timezone
from django.utils.text import format_lazy
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import OpenApiParameter
from rest_framework import status
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from base.models import IdempotentRequest

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
KEY_PATTERN = r"^[!-~]{1,255}$"  # 1-255 visible ASCII characters, e.g. a UUID
KEY_RE = re.compile(KEY_PATTERN)
# How long a duplicate waits for the first request with its key before it is told to retry.
LOCK_WAIT = "30s"
LOCK_NAMESPACE = b"starverse-idempotency"

IDEMPOTENCY_KEY_PARAMETER = OpenApiParameter(
    HEADER,
    str,
    OpenApiParameter.HEADER,
    required=False,
    pattern=KEY_PATTERN,
    description=(
        "Any unique string (a UUID is good), 1-255 visible ASCII characters. Retrying with the same key "
        "returns the first successful answer (with `Idempotent-Replayed: true`) and has no second effect; "
        "the same key with a different request is refused with 422. Keys are kept for 24 hours."
    ),
)


class IdempotencyKeyReused(APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_code = "idempotency_key_reused"


class IdempotencyKeyBusy(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = format_lazy(
        gettext_lazy("A request with this {header} is still being processed; retry in a few seconds."), header=HEADER
    )
    default_code = "idempotency_key_busy"


def check_key(key: str) -> None:
    if not KEY_RE.match(key):
        raise ValidationError({HEADER: [_("Use 1-255 visible ASCII characters (no spaces), e.g. a UUID.")]})


def fingerprint(request) -> str:
    """SHA-256 of the method, path and body; JSON key order and spacing don't matter."""
    data = request.data
    if hasattr(data, "lists"):  # a QueryDict from a form or multipart body
        data = {name: values for name, values in data.lists()}
    body = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(f"{request.method} {request.path}\n{body}".encode()).hexdigest()


def lock_key(user_id: int, key: str) -> int:
    digest = hashlib.sha256(LOCK_NAMESPACE + f":{user_id}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def wait_for_key(user_id: int, key: str) -> None:
    """Take the (user, key) lock for the rest of the transaction, waiting at most LOCK_WAIT."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('lock_timeout', %s, true)", [LOCK_WAIT])
        try:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [lock_key(user_id, key)])
        except OperationalError:
            raise IdempotencyKeyBusy() from None
        cursor.execute("SET LOCAL lock_timeout TO DEFAULT")


def stored_answer(user, key: str, request_hash: str) -> Response | None:
    """The answer to replay for this key, or None when the key is new (or expired and forgotten)."""
    stored = IdempotentRequest.objects.filter(user=user, key=key).first()
    if stored is None:
        return None
    if stored.is_expired():
        stored.delete()
        return None
    if stored.body_hash != request_hash:
        raise IdempotencyKeyReused(
            _(
                "This %(header)s was already used for a different request (%(method)s %(path)s with another body). "
                "Send a new key for a new request."
            )
            % {"header": HEADER, "method": stored.method, "path": stored.path}
        )
    body = json.loads(stored.response_body) if stored.response_body else None
    return Response(body, status=stored.status_code, headers={REPLAYED_HEADER: "true"})


def store_answer(request, key: str, request_hash: str, response: Response) -> None:
    body = JSONRenderer().render(response.data).decode()
    IdempotentRequest.objects.create(
        user=request.user,
        key=key,
        method=request.method,
        path=request.path[:500],
        body_hash=request_hash,
        status_code=response.status_code,
        response_body=body,
        created_at=timezone.now(),
    )


def idempotent(handler):
    """Decorate a DRF handler (`post`, `create`, an `@action`) to honour the Idempotency-Key header."""

    @functools.wraps(handler)
    def wrapper(view, request, *args, **kwargs):
        key = request.headers.get(HEADER)
        if key is None:
            return handler(view, request, *args, **kwargs)
        check_key(key)
        request_hash = fingerprint(request)  # parses the body first: malformed JSON is a 400 before any lock
        with transaction.atomic():
            wait_for_key(request.user.pk, key)
            replay = stored_answer(request.user, key, request_hash)
            if replay is not None:
                return replay
            response = handler(view, request, *args, **kwargs)
            if isinstance(response, Response) and 200 <= response.status_code < 300:
                store_answer(request, key, request_hash, response)
            return response

    return wrapper
