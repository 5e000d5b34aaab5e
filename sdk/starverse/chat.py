"""Chat with a deployment through the platform's OpenAI-compatible endpoint (`POST <site>/v1/chat/completions`,
docs/SERVING.md "The gateway"), with the client's API token: the answer whole (a `ChatReply`) or streamed
(a `ChatStream` of text deltas, read from the server-sent events' `data:` lines)."""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, overload

import httpx

from starverse import errors

if TYPE_CHECKING:
    from starverse.client import Client

# A generation on a CPU replica, or a request held through a cold start, is slow: wait long for the answer.
CHAT_TIMEOUT = httpx.Timeout(30.0, read=600.0)


@dataclass(frozen=True)
class Usage:
    """The tokens a chat completion took, as the endpoint counted them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    @classmethod
    def from_api(cls, data: Mapping[str, Any] | None) -> Usage:
        data = data or {}
        return cls(*(int(data.get(key) or 0) for key in ("prompt_tokens", "completion_tokens", "total_tokens")))


class ChatReply(str):
    """The assistant's answer: the text itself (a `str`), with `usage`, `finish_reason` and the `raw` JSON."""

    usage: Usage
    finish_reason: str | None
    raw: dict[str, Any]

    def __new__(cls, data: Mapping[str, Any]) -> ChatReply:
        choice = (data.get("choices") or [{}])[0]
        reply = super().__new__(cls, (choice.get("message") or {}).get("content") or "")
        reply.usage = Usage.from_api(data.get("usage"))
        reply.finish_reason = choice.get("finish_reason")
        reply.raw = dict(data)
        return reply


class ChatStream:
    """A streamed answer: iterate for its text as it comes; once it ends, `text` is the whole and `usage` the
    tokens counted (the endpoint sends them last). `close()`, or the end of a `with` block, stops it early and
    closes its connection."""

    def __init__(self, chunks: Generator[dict[str, Any], None, None]):
        self._chunks = chunks
        self.parts: list[str] = []
        self.usage: Usage | None = None
        self.finish_reason: str | None = None

    def __iter__(self) -> Iterator[str]:
        for chunk in self._chunks:
            if chunk.get("usage"):
                self.usage = Usage.from_api(chunk["usage"])
            for choice in chunk.get("choices") or []:
                self.finish_reason = choice.get("finish_reason") or self.finish_reason
                text = (choice.get("delta") or {}).get("content")
                if text:
                    self.parts.append(text)
                    yield text

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def close(self) -> None:
        self._chunks.close()

    def __enter__(self) -> ChatStream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class ChatCalls:
    """`Client.chat`: mixed into `starverse.Client`."""

    @overload
    def chat(
        self: Client,
        model: str,
        messages: list[Mapping[str, Any]],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        stream: Literal[False] = False,
    ) -> ChatReply: ...

    @overload
    def chat(
        self: Client,
        model: str,
        messages: list[Mapping[str, Any]],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        stream: Literal[True],
    ) -> ChatStream: ...

    @overload
    def chat(
        self: Client,
        model: str,
        messages: list[Mapping[str, Any]],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        stream: bool = False,
    ) -> ChatReply | ChatStream: ...

    def chat(
        self: Client,
        model: str,
        messages: list[Mapping[str, Any]],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        stream: bool = False,
    ) -> ChatReply | ChatStream:
        """`POST <site>/v1/chat/completions` to your deployment named `model` (see Deployment.chat)."""
        body: dict[str, Any] = {"model": model, "messages": list(messages), "stream": stream}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if temperature is not None:
            body["temperature"] = temperature
        url = f"{self.url.rstrip('/')}/v1/chat/completions"
        if stream:
            return ChatStream(stream_chunks(self.http, url, body))
        try:
            response = self.http.post(url, json=body, timeout=CHAT_TIMEOUT)
        except httpx.TransportError as error:  # a POST is never sent twice: it may have been answered
            raise errors.APIConnectionError(f"The request to {url} failed: {error}") from error
        if response.status_code >= 400:
            raise gateway_error(response)
        return ChatReply(response.json())


def stream_chunks(http: httpx.Client, url: str, body: dict) -> Generator[dict[str, Any], None, None]:
    """The JSON of each `data:` line of the endpoint's server-sent events, until `[DONE]`."""
    try:
        with http.stream("POST", url, json=body, timeout=CHAT_TIMEOUT) as response:
            if response.status_code >= 400:
                response.read()
                raise gateway_error(response)
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue  # blank separators, comments (": ping"), event names
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    return
                chunk = json.loads(data)
                if isinstance(chunk, dict) and isinstance(chunk.get("error"), dict):  # failed mid-stream
                    raise errors.APIError(chunk["error"].get("message") or "The stream failed.", body=chunk)
                yield chunk
    except httpx.TransportError as error:
        raise errors.APIConnectionError(f"The stream from {url} failed: {error}") from error


def gateway_error(response: httpx.Response) -> errors.APIError:
    """An error answer of the OpenAI-compatible endpoint ({"error": {"message", "type", "param", "code"}}) as the
    SDK's typed error: a 400 names its parameter, as the API's errors name their field."""
    try:
        body = response.json()
    except ValueError:
        body = response.text
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return errors.error_for(response.status_code, body)
    message = str(error.get("message") or f"HTTP {response.status_code}")
    shaped: dict[str, Any] = {"detail": message, "code": error.get("code")}
    if response.status_code == 400:
        shaped["errors"] = {error.get("param") or "non_field_errors": [message]}
    try:
        retry_after = float(response.headers.get("Retry-After", ""))
    except ValueError:
        retry_after = None
    typed = errors.error_for(response.status_code, shaped, retry_after)
    typed.body = {**shaped, "error": error}  # `code` reads as the API's errors do; the endpoint's own body beside it
    return typed
