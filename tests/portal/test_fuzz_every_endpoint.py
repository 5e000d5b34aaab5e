"""Crafted values thrown at every URL of the site and the API, signed in and not: never a 5xx.

Hypothesis over the URL conf: each route gets its path parameters, query parameters and body
fields (JSON, URL-encoded or multipart) filled with values that broke it before: NUL characters,
Unicode digits and superscripts, lone surrogates, huge and non-finite numbers, impossible dates,
5,000-deep JSON and long strings. API answers are JSON in the error format; nothing is a 5xx.
Derandomized and bounded (a few examples per route), so it runs the same in well under a minute.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import quote, urlencode

import pytest
from django import forms
from django.core.cache import cache
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from fleet.models import ChipType, Dataset, Job
from market.models import Bid
from portal.models import ApiToken
from tests.support.accounts import PASSWORD

pytestmark = pytest.mark.django_db(transaction=True)

# Values that broke (or could break) a view: PostgreSQL refuses NUL and lone surrogates, int() takes
# "²" as a digit, datetime refuses February 30th, Decimal reads "1e400", JSON decoders recurse.
NASTY_TEXT = [
    "\x00",
    "a\x00b",
    "²",
    "upload:²",
    "upload:٣",
    "upload:99999999999999999999",
    "١٢٣",
    "⁴²",
    "Ⅻ",
    "2024-02-30",
    "2024-13-45T00:00",
    "2024-02-30T00:00:00",
    "0000-00-00",
    "9999-99-99T99:99",
    "2026-13",
    "-1",
    "0",
    "1e400",
    "NaN",
    "Infinity",
    "1000000",
    "1000000.000001",
    "0.0000001",
    "99999999999999999999999999",
    "x" * 5000,
    "../../../etc/passwd",
    "' OR 1=1 --",
    '=HYPERLINK("http://x")',
    "\u202e\u0000",
    "😀",
    "",
    " ",
]
SURROGATE_JSON = '"\\ud800"'  # valid JSON text, but no UTF-8 (PostgreSQL can't store it)
DEPTHS = [33, 900, 5000]
HUGE_NUMBERS = ["1" + "0" * 30, "-" + "9" * 30, str(2**63), str(-(2**63) - 1), "1e400", "-0.0", "1.5"]

nasty_text = st.one_of(
    st.sampled_from(NASTY_TEXT),
    st.text(alphabet=st.sampled_from("\x0009²³¹٣੩⁰-.:upload"), max_size=12),
)


def deep_json(depth: int) -> str:
    return "[" * depth + "]" * depth


json_value = st.one_of(
    nasty_text.map(json.dumps),
    st.sampled_from(HUGE_NUMBERS),
    st.sampled_from(DEPTHS).map(deep_json),
    st.just(SURROGATE_JSON),
    st.sampled_from(["null", "true", "[]", "{}", '{"\\u0000": 1}', '{"\\ud800": 1}', '{"rtx-4090": 1e400}']),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
)


@dataclass
class Route:
    """One URL pattern: how to fill its path, which query and body names it knows, how it takes a body."""

    template: str
    groups: list[str]
    methods: list[str]
    query: set[str] = field(default_factory=set)
    body: set[str] = field(default_factory=set)
    multipart: bool = False

    @property
    def is_api(self) -> bool:
        return self.template.startswith("/api/")

    @property
    def ways_in(self) -> list[str]:
        """Signed in most of the time (a view must be reached to be tested), anonymous some of it."""
        if self.template.startswith("/api/v1/agent/"):
            return ["node", "node", "none"]
        return ["token", "token", "none"] if self.is_api else ["session", "session", "none"]


GROUP = re.compile(r"<(?:(?P<conv>\w+):)?(?P<name>\w+)>|\(\?P<(?P<rname>\w+)>[^)]*\)")
SKIP = re.compile(r"\\\.\(\?P<format>|\^\.\*\$|^/admin/(?!login)|/api/v1/(schema|docs)/")
COMMON_QUERY = {"page", "since", "until", "status", "job", "chip", "group", "next", "hours", "since_step", "format"}


def walk(patterns, prefix: str = "/") -> Iterator[str]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern)


def template_of(raw: str) -> tuple[str, list[str]]:
    """'/api/v1/^jobs/(?P<pk>[^/.]+)/$' -> ('/api/v1/jobs/{pk}/', ['pk'])."""
    names: list[str] = []

    def placeholder(match: re.Match) -> str:
        name = match["name"] or match["rname"]
        names.append(name)
        return "{" + name + "}"

    text = GROUP.sub(placeholder, raw).replace("^", "").replace("$", "")
    return text.replace("\\.", "."), names


def form_field_names() -> set[str]:
    """Every field name of the site's forms (ours and allauth's): what a page's POST might read."""
    names: set[str] = set()
    stack = [forms.Form, forms.ModelForm]
    while stack:
        form = stack.pop()
        stack.extend(form.__subclasses__())
        names.update(getattr(form, "base_fields", {}))
    return names


def schema_names() -> dict[str, tuple[list[str], set[str], set[str], bool]]:
    """Per API path template: its methods, query parameter and body field names, whether it takes multipart."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    known: dict[str, tuple[list[str], set[str], set[str], bool]] = {}
    for path, operations in schema["paths"].items():
        query, body, multipart = set(), set(), False
        for operation in operations.values():
            query |= {p["name"] for p in operation.get("parameters", []) if p.get("in") == "query"}
            for media, content in operation.get("requestBody", {}).get("content", {}).items():
                multipart |= media == "multipart/form-data"
                ref = content.get("schema", {}).get("$ref", "")
                component = schema["components"]["schemas"].get(ref.rsplit("/", 1)[-1], content.get("schema", {}))
                body |= set(component.get("properties", {}))
        known[path] = (sorted(method.upper() for method in operations), query, body, multipart)
    return known


def routes() -> list[Route]:
    documented = schema_names()
    page_fields = form_field_names()
    found: list[Route] = []
    for raw in walk(get_resolver().url_patterns):
        if SKIP.search(raw):
            continue
        template, groups = template_of(raw)
        methods, query, body, multipart = documented.get(template, (["GET", "POST"], set(), set(), False))
        if not template.startswith("/api/"):
            body = page_fields
        found.append(Route(template, groups, methods, query | COMMON_QUERY, body, multipart))
    return found


@dataclass
class World:
    """What the crafted requests may refer to: Alice's objects (valid ids) and her ways in."""

    ids: list[str]
    token: str
    node_token: str


def path_value(world: World) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(world.ids), nasty_text.filter(bool)).map(lambda v: quote(v, safe=""))


@st.composite
def crafted_request(draw, route: Route, world: World) -> dict:
    path = route.template
    for name in route.groups:
        path = path.replace("{" + name + "}", draw(path_value(world)), 1)
    names = sorted(route.query)
    query = {name: draw(nasty_text) for name in draw(st.lists(st.sampled_from(names), max_size=3, unique=True))}
    method = draw(st.sampled_from([*route.methods, *route.methods, "GET", "POST", "PATCH", "DELETE"]))
    fields = sorted(route.body) or ["name"]
    chosen = draw(st.lists(st.sampled_from(fields), min_size=1, max_size=4, unique=True))
    if route.is_api and not route.multipart:
        whole = draw(st.one_of(st.none(), st.sampled_from([deep_json(5000), '{"a":' * 2000 + "1" + "}" * 2000])))
        body = whole or "{" + ", ".join(f"{json.dumps(name)}: {draw(json_value)}" for name in chosen) + "}"
        content_type = "application/json"
    else:
        body = {name: draw(nasty_text) for name in chosen}
        content_type = None
    return {
        "method": method,
        "url": path + ("?" + urlencode(query) if query else ""),
        "body": body,
        "content_type": content_type,
        "auth": draw(st.sampled_from(route.ways_in)),
    }


def send(request: dict, world: World, clients: dict[str, Client]):
    client = clients["session" if request["auth"] == "session" else "none"]
    headers = {}
    if request["auth"] == "token":
        headers["HTTP_AUTHORIZATION"] = f"Bearer {world.token}"
    elif request["auth"] == "node":
        headers["HTTP_AUTHORIZATION"] = f"Bearer {world.node_token}"
    method = request["method"].lower()
    if request["method"] == "GET":
        return client.get(request["url"], **headers)
    if request["content_type"]:
        return getattr(client, method)(request["url"], request["body"], content_type=request["content_type"], **headers)
    if method == "post":
        return client.post(request["url"], request["body"], **headers)  # multipart, as a form posts
    return getattr(client, method)(request["url"], urlencode(request["body"]), **headers)


def check(response, request: dict) -> None:
    label = f"{request['method']} {request['url'][:200]!r} ({request['auth']})"
    url = request["url"]
    stripe_unconfigured = response.status_code == 503 and ("/topups/" in url)
    # /readyz answers 503 by design when this instance's storage can't be reached
    not_ready = response.status_code == 503 and url.startswith("/readyz") and "failed" in response.json()
    assert response.status_code < 500 or stripe_unconfigured or not_ready, f"{label} answered {response.status_code}"
    if url.startswith("/api/") and response.status_code >= 400:
        assert response["Content-Type"].startswith("application/json"), f"{label}: {response['Content-Type']}"
        assert "detail" in response.json(), f"{label}: {response.content[:200]!r}"


EXAMPLES = settings(
    max_examples=12,
    derandomize=True,
    deadline=None,
    database=None,
    phases=[Phase.generate],
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture
def world(alice, operator, fund, token_for, small_fleet) -> World:
    fund(alice)
    job = Job.objects.create(
        owner=alice, name="mine", model_name="llama-tiny", per_device_batch_size=4, max_steps=10,
        max_budget_per_hour=28_000_000,
    )  # fmt: skip
    dataset = Dataset.objects.create(
        owner=alice,
        name="mine",
        kind="text",
        store_prefix=f"datasets/{alice.pk}/mine",
        file_name="data.txt",
        size_bytes=1,
        samples=1,
    )
    bid = Bid.objects.create(
        owner=alice, job=job, chip_type=ChipType.objects.get(slug="tpu-v5e"), chips=1,
        max_price_per_hour=2_000_000, placed_at=job.created_at,
    )  # fmt: skip
    other_token = ApiToken.issue(alice, name="other")[0]
    ids = [str(job.pk), str(dataset.pk), str(bid.pk), str(other_token.pk), "a-4090", "rtx-4090", "2026-03"]
    return World(ids=ids, token=token_for(alice), node_token=next(iter(small_fleet.values())))


@pytest.fixture
def generous_limits(settings):
    """Throttles and lockouts stay out of the way (they answer 429, which would hide the views)."""
    framework = settings.REST_FRAMEWORK
    rates = {name: "100000/min" for name in framework["DEFAULT_THROTTLE_RATES"]}
    settings.REST_FRAMEWORK = {**framework, "DEFAULT_THROTTLE_RATES": rates}
    settings.AGENT_POLL_WAIT_S = 0  # a long-poll would wait for commands that never come
    cache.clear()
    yield
    cache.clear()


def test_crafted_values_at_every_route_never_get_a_server_error(world, alice, generous_limits):
    clients = {"none": Client(), "session": Client()}
    clients["session"].login(username=alice.username, password=PASSWORD)
    tried = []
    for route in routes():

        @EXAMPLES
        @given(request=crafted_request(route, world))
        def throw(request):
            check(send(request, world, clients), request)

        throw()
        tried.append(route.template)
    assert len(tried) >= 60, tried  # the URL conf was walked (an empty walk would pass vacuously)
