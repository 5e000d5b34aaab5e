"""The SDK against a live server: configuration, typed errors, retries that reuse one idempotency key."""

from __future__ import annotations

import stat

import httpx
import pytest
import starverse
from starverse import errors
from starverse.config import config_path, load_config, save_config

from fleet.models import Job
from tests.support.jobs import JOB_SPEC as SPEC

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    """No URL, key or config file leaks in from the machine running the tests."""
    monkeypatch.delenv("STARVERSE_URL", raising=False)
    monkeypatch.delenv("STARVERSE_API_KEY", raising=False)
    monkeypatch.delenv("STARVERSE_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


@pytest.fixture
def sdk_for(live_server, token_for):
    def make(user, **kwargs) -> starverse.Client:
        return starverse.Client(live_server.url, token_for(user, **kwargs), backoff=0.01)

    return make


# -- configuration ---------------------------------------------------------------------------------


def test_without_a_url_the_sdk_says_how_to_set_one():
    with pytest.raises(starverse.ConfigError, match="STARVERSE_URL"):
        starverse.Client()


def test_without_a_key_the_sdk_says_how_to_get_one(monkeypatch):
    monkeypatch.setenv("STARVERSE_URL", "http://127.0.0.1:9")
    with pytest.raises(starverse.ConfigError, match="STARVERSE_API_KEY"):
        starverse.Client()


def test_a_url_without_a_scheme_is_a_config_error(monkeypatch):
    monkeypatch.setenv("STARVERSE_URL", "127.0.0.1:8000")
    with pytest.raises(starverse.ConfigError, match="http://"):
        starverse.Client(api_key="sv_x")


def test_a_broken_config_file_is_named_in_the_error(tmp_path):
    path = config_path()
    path.parent.mkdir(parents=True)
    path.write_text('url = "http://x\n')
    with pytest.raises(starverse.ConfigError, match=str(path)):
        starverse.Client()


def test_the_saved_config_is_readable_only_by_its_owner_and_is_used(tmp_path):
    path = save_config("http://127.0.0.1:8000/", "sv_secret", username="alice")

    assert path == tmp_path / "xdg" / "starverse" / "config.toml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert load_config() == starverse.Config(url="http://127.0.0.1:8000", api_key="sv_secret")


def test_the_environment_wins_over_the_file(monkeypatch):
    save_config("http://file:1", "sv_file")
    monkeypatch.setenv("STARVERSE_URL", "http://env:2")
    monkeypatch.setenv("STARVERSE_API_KEY", "sv_env")

    assert load_config() == starverse.Config(url="http://env:2", api_key="sv_env")


def test_an_unreachable_platform_is_a_connection_error_after_retries():
    client = starverse.Client("http://127.0.0.1:9", "sv_x", retries=1, backoff=0.01)
    with pytest.raises(starverse.APIConnectionError, match="127.0.0.1:9"):
        client.account()


# -- calls and typed errors ------------------------------------------------------------------------


def test_the_account_and_chips_come_back_as_json(sdk_for, alice, fund, catalog):
    fund(alice, "42")
    client = sdk_for(alice)

    assert client.account()["balance"] == "42.00"
    assert {chip["slug"] for chip in client.chips()} >= {"rtx-4090", "tpu-v5e", "ascend-910b"}


def test_a_wrong_token_is_an_auth_error(live_server):
    with pytest.raises(starverse.AuthError, match="Invalid API token"):
        starverse.Client(live_server.url, "sv_wrong").account()


def test_an_expired_token_is_an_auth_error_on_a_write(sdk_for, alice, fund, small_fleet):
    fund(alice)
    with pytest.raises(starverse.AuthError, match="expired"):
        sdk_for(alice, expired=True).create_job(SPEC)
    assert not Job.objects.exists()


def test_a_read_only_token_reads_but_cannot_submit(sdk_for, alice, fund, small_fleet):
    fund(alice)
    client = sdk_for(alice, scope="read_only")

    assert client.jobs() == []
    with pytest.raises(starverse.PermissionDenied, match="read-only"):
        client.create_job(SPEC)
    assert not Job.objects.exists()


def test_no_free_chips_is_no_capacity(sdk_for, alice, catalog):
    with pytest.raises(starverse.NoCapacity):
        sdk_for(alice).quote(SPEC)


def test_a_budget_below_every_plan_is_budget_too_low(sdk_for, alice, small_fleet):
    with pytest.raises(starverse.BudgetTooLow) as raised:
        sdk_for(alice).quote({**SPEC, "max_budget": "0.01"})
    assert "max_budget" in raised.value.errors


def test_a_launch_the_balance_cannot_hold_is_insufficient_credit(sdk_for, alice, small_fleet):
    with pytest.raises(starverse.InsufficientCredit, match="balance"):
        sdk_for(alice).create_job(SPEC)
    assert not Job.objects.exists()


def test_unknown_fields_are_refused_by_name(sdk_for, alice, small_fleet):
    with pytest.raises(starverse.ValidationError) as raised:
        sdk_for(alice).quote({**SPEC, "max_budjet": "28"})
    assert "max_budjet" in raised.value.errors
    assert "max_budjet" in str(raised.value)


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_steps", "many"), ("per_device_batch_size", -1), ("max_budget", [28]), ("chip_counts", "rtx-4090")],
)
def test_wrong_types_name_the_field(sdk_for, alice, small_fleet, field, value):
    with pytest.raises(starverse.ValidationError) as raised:
        sdk_for(alice).quote({**SPEC, field: value})
    assert list(raised.value.errors) == [field]


def test_malformed_json_is_a_400_with_a_clear_detail(live_server, token_for, alice):
    response = httpx.post(
        f"{live_server.url}/api/v1/quotes/",
        content=b'{"model": "llama-tiny",',
        headers={"Authorization": f"Bearer {token_for(alice)}", "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert "JSON parse error" in response.json()["detail"]


def test_the_plan_prints_chips_speed_price_and_eta(live_server, token_for, alice, small_fleet):
    client = starverse.Client(live_server.url, token_for(alice))

    cluster = starverse.accelerate(model_id="llama-tiny", policy="cost-performance", max_budget=28, client=client)

    text = str(cluster.plan)
    assert sum(cluster.plan.chip_counts.values()) >= 1
    for chip in cluster.plan.chip_counts:
        assert chip in text
    assert "tokens/s" in text and "¥" in text and "/h" in text and "ETA" in text
    assert cluster.plan.price_per_hour > 0


# -- retries -------------------------------------------------------------------------------------


class LoseFirstAnswer(httpx.BaseTransport):
    """Forwards every request to the live server but drops the first POST's answer (a timeout)."""

    def __init__(self):
        self.inner = httpx.HTTPTransport()
        self.keys: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.method == "POST":
            self.keys.append(request.headers.get("Idempotency-Key"))
            if len(self.keys) == 1:
                response.read()
                raise httpx.ReadTimeout("the answer was lost", request=request)
        return response


def test_a_submit_whose_answer_is_lost_is_retried_with_the_same_key_and_starts_one_job(
    live_server, token_for, alice, fund, small_fleet, no_celery
):
    fund(alice)
    transport = LoseFirstAnswer()
    client = starverse.Client(live_server.url, token_for(alice), transport=transport, backoff=0.01)

    job = client.create_job(SPEC)

    assert len(transport.keys) == 2 and transport.keys[0] == transport.keys[1] and transport.keys[0]
    assert list(Job.objects.values_list("pk", flat=True)) == [job["id"]]


def test_5xx_and_429_are_retried_with_backoff_and_the_same_key():
    seen = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Idempotency-Key"])
        if len(seen) == 1:
            return httpx.Response(503, json={"detail": "restarting"})
        if len(seen) == 2:
            return httpx.Response(429, json={"detail": "slow down"}, headers={"Retry-After": "0"})
        return httpx.Response(201, json={"id": 7, "status": "queued"})

    client = starverse.Client("http://sv.test", "sv_x", transport=httpx.MockTransport(answer), backoff=0.01)

    assert client.create_job(SPEC) == {"id": 7, "status": "queued"}
    assert len(seen) == 3 and len(set(seen)) == 1


def test_a_post_without_a_key_is_not_resent_after_a_lost_answer():
    calls = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise httpx.ReadTimeout("lost", request=request)

    client = starverse.Client("http://sv.test", "sv_x", transport=httpx.MockTransport(answer), backoff=0.01)

    with pytest.raises(starverse.APIConnectionError):
        client.quote(SPEC)
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (
            400,
            {"detail": "Invalid input: balance.", "errors": {"balance": ["Your balance is ¥0.00"]}},
            "InsufficientCredit",
        ),
        (400, {"detail": "x", "code": "budget_too_low", "errors": {"max_budget": ["No plan"]}}, "BudgetTooLow"),
        (400, {"detail": "x", "code": "no_capacity", "errors": {"chip_counts": ["No free chips"]}}, "NoCapacity"),
        (400, {"detail": "x", "code": "model_does_not_fit", "errors": {"model": ["Too big"]}}, "ModelDoesNotFit"),
        (400, {"detail": "x", "code": "too_many_queued", "errors": {"non_field_errors": ["5 wait"]}}, "TooManyQueued"),
        (400, {"detail": "x", "code": "invalid", "errors": {"max_steps": ["A valid integer"]}}, "ValidationError"),
        (401, {"detail": "Invalid API token."}, "AuthError"),
        (403, {"detail": "This API token is read-only."}, "PermissionDenied"),
        (404, {"detail": "Not found."}, "NotFound"),
        (422, {"detail": "This Idempotency-Key was already used"}, "IdempotencyConflict"),
        (429, {"detail": "Request was throttled."}, "RateLimited"),
        (500, "<html>Server Error</html>", "ServerError"),
    ],
)
def test_error_answers_map_to_typed_errors(status, body, kind):
    error = errors.error_for(status, body)
    assert type(error).__name__ == kind
    assert error.status == status


# -- Ctrl-C while following ------------------------------------------------------------------------


@pytest.fixture
def interrupted_fit(live_server, token_for, alice, fund, small_fleet, no_celery, monkeypatch):
    """fit() on a live server whose following is interrupted by Ctrl-C at once."""
    fund(alice)

    def interrupt(run, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("starverse.training.follow_run", interrupt)
    cluster = starverse.accelerate(
        "llama-tiny", max_budget=28, client=starverse.Client(live_server.url, token_for(alice))
    )

    def fit(**kwargs):
        return starverse.Trainer(cluster).fit("llama-tiny", max_steps=10, poll=0.1, **kwargs)

    return fit


def test_ctrl_c_with_cancel_cancels_the_job_and_returns_the_run(interrupted_fit):
    run = interrupted_fit(on_interrupt="cancel")

    assert run.status == "cancelled"
    assert Job.objects.get(pk=run.id).status == "cancelled"


def test_ctrl_c_asks_and_a_yes_cancels(interrupted_fit, monkeypatch):
    monkeypatch.setattr("sys.stdin.isatty", lambda: True, raising=False)
    asked = []
    monkeypatch.setattr("builtins.input", lambda prompt: asked.append(prompt) or "y")

    run = interrupted_fit()

    assert "Cancel job" in asked[0]
    assert run.status == "cancelled"


def test_ctrl_c_without_a_terminal_leaves_the_job_running_and_stops_the_script(interrupted_fit):
    with pytest.raises(KeyboardInterrupt):
        interrupted_fit()  # pytest's stdin is no terminal: nobody to ask

    assert Job.objects.get().status == "queued"
