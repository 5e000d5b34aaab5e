"""The little of HTTP the agent service needs, straight on ASGI (no framework: every poll counts)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from django.core.serializers.json import DjangoJSONEncoder
from rest_framework.exceptions import ValidationError

from base.api.errors import validation_code
from base.api.parsers import check_document, too_deep


class HttpError(Exception):
    """Answer with this status and {"detail": message} (plus `headers`; plus "code" and "errors" when given)."""

    def __init__(
        self, status: int, detail: str, headers: tuple[tuple[bytes, bytes], ...] = (), *, fields: dict | None = None
    ) -> None:
        super().__init__(detail)
        self.status, self.detail, self.headers, self.fields = status, detail, headers, fields or {}

    @property
    def body(self) -> dict:
        return {"detail": self.detail, **self.fields}

    @classmethod
    def invalid(cls, error: ValidationError) -> HttpError:
        """A refused body as the site's API answers it: {"detail", "code", "errors": {field: [message]}}."""
        errors = {field: [str(message) for message in messages] for field, messages in error.detail.items()}
        fields = {"code": validation_code(error), "errors": errors}
        return cls(400, f"Invalid input: {', '.join(errors)}.", fields=fields)


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value
    client: str  # the peer's address ("" when the server does not say)
    body: bytes

    @property
    def META(self) -> dict[str, str]:  # noqa: N802 - what workers.api.client_address.seen_address reads
        return {"REMOTE_ADDR": self.client, "HTTP_X_FORWARDED_FOR": self.headers.get("x-forwarded-for", "")}

    def json(self) -> dict:
        """The body as a JSON object ({} when empty), or a 400 as DRF's parser would answer."""
        if not self.body:
            return {}
        try:
            data = json.loads(self.body)
        except RecursionError:  # 5,000 nested brackets exhaust the decoder's stack: as the site's parser says
            raise HttpError.invalid(too_deep("non_field_errors")) from None
        except ValueError as error:
            raise HttpError(400, f"JSON parse error - {error}") from error
        try:
            check_document(data)  # deep nesting, NUL and lone surrogates, refused as the site's parser does
        except ValidationError as error:
            raise HttpError.invalid(error) from None
        if not isinstance(data, dict):
            raise HttpError(400, "Expected a JSON object.")
        return data


async def read_request(scope: dict, receive, max_body: int) -> Request:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionResetError("client went away")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_body:
            raise HttpError(413, "Request body too large.")
        chunks.append(chunk)
        if not message.get("more_body"):
            break
    headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
    client = scope.get("client") or ("", 0)
    return Request(scope["method"], scope["path"], headers, client[0] or "", b"".join(chunks))


async def send_json(send, status: int, body: object, headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    payload = json.dumps(body, cls=DjangoJSONEncoder, separators=(",", ":")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
