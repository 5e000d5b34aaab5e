"""Deployments: a trained model served behind the platform's OpenAI-compatible endpoint (docs/SERVING.md).

    deployment = starverse.deploy(model="job:42", name="tiny-chat", max_budget=5, min_replicas=0)
    deployment.wait_ready()          # or let the first request start a replica (a cold start)
    print(deployment.chat([{"role": "user", "content": "Hello"}], max_tokens=32))
    for text in deployment.chat(messages, stream=True):
        print(text, end="")
    deployment.delete()

`Deployment` is a live handle: it reads like the API's JSON (typed fields, and `deployment["status"]`), and
`refresh`, `scale`, `delete` and `wait_ready` update it in place. `chat` (starverse/chat.py) sends
`POST <site>/v1/chat/completions` with the same API token; the official `openai` client works too, with
`base_url=deployment.base_url`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, ClassVar, Literal, overload

from starverse import errors
from starverse.amounts import cents
from starverse.objects import APIFields, APIObject, decimal, when

if TYPE_CHECKING:
    from starverse.chat import ChatReply, ChatStream
    from starverse.client import Client

READY, IDLE = "ready", "idle"
ENDED = {"stopped", "failed"}
JOB_ID = re.compile(r"^[0-9]+$")


def model_reference(model: str | int) -> str:
    """What `deploy` takes as the model: a job id (42 or "42") is that job's trained model, `job:42`; a
    reference (`model:7`, `job:42`, a cached Hub id) as it is."""
    text = str(model).strip()
    return f"job:{text}" if JOB_ID.match(text) else text


def default_name(model: str) -> str:
    """A deployment's name when none is given: the model's reference spelt as a name (`job:42` -> `job-42`)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", model).strip("-.")[:64] or "model"


@dataclass(frozen=True)
class Replica(APIObject):
    """A replica that hasn't ended: the job that serves, and its engine's last state."""

    job: int = 0
    status: str = ""
    serving_state: str = ""
    engine: str = ""
    simulated: bool = False
    chip_type: str | None = None
    started_at: datetime | None = None

    converters: ClassVar[dict[str, Any]] = {"started_at": when}


@dataclass(eq=False)
class Deployment(APIFields):
    """A deployment as the API shows it, and the calls on it; `refresh` (and every call) reads it again."""

    id: int = 0
    name: str = ""
    status: str = ""
    status_reason: str = ""
    model: str = ""
    chip: str = ""
    chips_per_replica: int = 1
    policy: str = ""
    max_budget: Decimal | None = None
    total_budget: Decimal | None = None
    spot: bool = False
    spot_bid: Decimal | None = None
    min_replicas: int = 0
    max_replicas: int = 1
    idle_timeout_s: int = 0
    max_model_len: int | None = None
    endpoint: dict[str, Any] = field(default_factory=dict)
    replicas: list[Replica] = field(default_factory=list)
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: Decimal = Decimal(0)
    price_per_million_tokens: Decimal | None = None
    created_at: datetime | None = None
    last_request_at: datetime | None = None
    stopped_at: datetime | None = None
    client: Client | None = field(default=None, repr=False, kw_only=True)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, kw_only=True)

    converters: ClassVar[dict[str, Any]] = {
        "max_budget": decimal,
        "total_budget": decimal,
        "spot_bid": decimal,
        "cost": lambda value: decimal(value) or Decimal(0),
        "price_per_million_tokens": decimal,
        "endpoint": lambda value: dict(value or {}),
        "replicas": lambda value: [Replica.from_api(item) for item in value or []],
        "created_at": when,
        "last_request_at": when,
        "stopped_at": when,
    }

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL to send requests to (`<site>/v1`), naming `name` as the model."""
        return self.endpoint.get("base_url", "")

    @property
    def ready(self) -> bool:
        return self.status == READY

    def load(self, data: Mapping[str, Any]) -> Deployment:
        """Take the API's new answer in place."""
        for name, value in self.fields_of(data).items():
            setattr(self, name, value)
        self.raw = dict(data)
        return self

    def refresh(self) -> Deployment:
        return self.load(self.api.get(f"deployments/{self.id}/"))

    def scale(
        self, min_replicas: int | None = None, max_replicas: int | None = None, *, idle_timeout_s: int | None = None
    ) -> Deployment:
        """New replica bounds (and idle timeout); what is left out stays. A raised minimum starts replicas now."""
        changes = {"min_replicas": min_replicas, "max_replicas": max_replicas, "idle_timeout_s": idle_timeout_s}
        body = {key: value for key, value in changes.items() if value is not None}
        return self.load(self.api.request("PATCH", f"deployments/{self.id}/", json=body))

    def delete(self) -> Deployment:
        """Stop it for good: its replicas stop (and their billing with them); the name is free again."""
        return self.load(self.api.request("DELETE", f"deployments/{self.id}/"))

    def wait_ready(self, timeout: float = 600.0, poll: float = 2.0) -> Deployment:
        """Poll until a replica answers. Raises DeploymentFailed if it fails or is stopped, TimeoutError past
        `timeout` seconds, and at once a StarverseError if it is scaled to zero (status `idle`): nothing starts
        until a request comes (`chat` waits through that cold start) or `scale(min_replicas=1)`."""
        deadline = time.monotonic() + timeout
        self.refresh()
        while not self.ready:
            if self.status in ENDED:
                raise errors.DeploymentFailed(f"Deployment {self.name} is {self.status}: {self.status_reason}", self)
            if self.status == IDLE:
                raise errors.StarverseError(
                    f"Deployment {self.name} is scaled to zero: its first request starts a replica, or "
                    "scale(min_replicas=1) starts one now."
                )
            if time.monotonic() >= deadline:
                raise TimeoutError(f"Deployment {self.name} has no ready replica after {timeout:g} s ({self.status}).")
            time.sleep(poll)
            self.refresh()
        return self

    @overload
    def chat(
        self,
        messages: list[Mapping[str, Any]],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        stream: Literal[False] = False,
    ) -> ChatReply: ...

    @overload
    def chat(
        self,
        messages: list[Mapping[str, Any]],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        stream: Literal[True],
    ) -> ChatStream: ...

    @overload
    def chat(
        self,
        messages: list[Mapping[str, Any]],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        stream: bool = False,
    ) -> ChatReply | ChatStream: ...

    def chat(
        self,
        messages: list[Mapping[str, Any]],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        stream: bool = False,
    ) -> ChatReply | ChatStream:
        """Ask the deployment: the answer's text (a ChatReply, with `usage`), or with `stream=True` a ChatStream
        to iterate for the text as it comes. A request to a deployment scaled to zero waits while a replica
        starts; past the platform's cold-start timeout it is a ServerError (503) to retry."""
        return self.api.chat(self.name, messages, max_tokens=max_tokens, temperature=temperature, stream=stream)

    @property
    def api(self) -> Client:
        if self.client is None:
            raise errors.ConfigError("This Deployment has no client: get it from a Client (or starverse.deploy).")
        return self.client

    def __str__(self) -> str:
        ready = sum(replica.serving_state == READY for replica in self.replicas)
        return (
            f"Deployment {self.id} {self.name} ({self.model}): {self.status}, {ready}/{len(self.replicas)} replicas "
            f"ready, {self.requests} requests, cost ¥{cents(self.cost)}"
        )


class DeploymentCalls:
    """Deploy, list and find deployments: mixed into `starverse.Client` (a Deployment does the rest)."""

    def deploy(
        self: Client,
        model: str | int,
        name: str | None = None,
        *,
        max_budget: str | int | Decimal = 28,
        chip: str | None = None,
        chips_per_replica: int | None = None,
        min_replicas: int = 1,
        max_replicas: int | None = None,
        idle_timeout_s: int | None = None,
        spot: bool = False,
        spot_bid: str | Decimal | None = None,
        total_budget: str | Decimal | None = None,
        policy: str | None = None,
        max_model_len: int | None = None,
        idempotency_key: str | None = None,
    ) -> Deployment:
        """Serve a model: a job's output (`42` or `job:42`), an upload (`model:7`) or a cached Hub model, under
        `name` (default: the reference spelt as a name, `job-42`). `max_budget` is ¥ per hour per replica;
        `min_replicas` 0 scales to zero when idle. A refusal is a ValidationError naming the field."""
        from starverse.client import new_key  # client.py mixes this class in: imported here, not at the top

        reference = model_reference(model)
        body = {
            "name": name or default_name(reference),
            "model": reference,
            "max_budget": str(max_budget),
            "min_replicas": min_replicas,
            "max_replicas": max(min_replicas, 1) if max_replicas is None else max_replicas,
            "spot": spot,
            "chip": chip,
            "chips_per_replica": chips_per_replica,
            "idle_timeout_s": idle_timeout_s,
            "spot_bid": None if spot_bid is None else str(spot_bid),
            "total_budget": None if total_budget is None else str(total_budget),
            "policy": policy,
            "max_model_len": max_model_len,
        }
        body = {key: value for key, value in body.items() if value is not None}
        answer = self.post("deployments/", body, idempotency_key=idempotency_key or new_key())
        return Deployment.from_api(answer, client=self)

    def deployments(self: Client, status: str | None = None, name: str | None = None) -> list[Deployment]:
        """Your deployments, newest first (stopped ones too; `status=` and `name=` filter)."""
        return [Deployment.from_api(item, client=self) for item in self.pages("deployments/", status=status, name=name)]

    def deployment(self: Client, id_or_name: int | str) -> Deployment:
        """One deployment by id, or by name (the live one of that name, else the newest stopped one)."""
        if isinstance(id_or_name, int) or JOB_ID.match(str(id_or_name)):
            return Deployment.from_api(self.get(f"deployments/{int(id_or_name)}/"), client=self)
        found = self.deployments(name=str(id_or_name))
        if not found:
            raise errors.NotFound(f"No deployment named {id_or_name!r} among yours.", status=404)
        return next((item for item in found if item.status != "stopped"), found[0])


def deploy(model: str | int, name: str | None = None, *, client: Client | None = None, **options: Any) -> Deployment:
    """Serve a model with the configured platform (or `client`); see Client.deploy for the options."""
    from starverse.client import Client

    return (client or Client()).deploy(model, name, **options)


def deployments(
    *, client: Client | None = None, status: str | None = None, name: str | None = None
) -> list[Deployment]:
    """Your deployments with the configured platform (or `client`), newest first."""
    from starverse.client import Client

    return (client or Client()).deployments(status=status, name=name)
