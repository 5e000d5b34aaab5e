"""HTTP client of the Starverse REST API (/api/v1/): retries with backoff, idempotency keys, typed errors."""

from __future__ import annotations

import random
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx

from starverse import errors
from starverse.chat import ChatCalls
from starverse.config import Config, load_config
from starverse.files import API_PREFIX, UPLOAD_READ_TIMEOUT_S, FileCalls
from starverse.objects import Hyperparameters, hyperparameters_body
from starverse.serving import DeploymentCalls
from starverse.version import VERSION

USER_AGENT = f"starverse-python/{VERSION}"
# Worth retrying: the platform restarting, overloaded or asking us to slow down, or a duplicate in flight.
RETRY_STATUSES = {409, 429, 500, 502, 503, 504}


class Client(FileCalls, DeploymentCalls, ChatCalls):
    """One platform, one token. The account, job and model methods return the API's JSON (dicts and lists);
    datasets, checkpoints, events and deployments come back as typed objects (starverse.objects,
    starverse.serving) that read like it too."""

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 4,
        backoff: float = 0.5,
        transport: httpx.BaseTransport | None = None,
        need_key: bool = True,
    ):
        self.config: Config = load_config(url, api_key, need_key=need_key)
        self.retries, self.backoff = retries, backoff
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        self.http = httpx.Client(base_url=self.config.url, headers=headers, timeout=timeout, transport=transport)

    @property
    def url(self) -> str:
        return self.config.url

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the transport: retries and errors -------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict | None = None,
        idempotency_key: str | None = None,
        files: dict | None = None,
        data: dict | None = None,
        timeout: httpx.Timeout | None = None,
    ) -> Any:
        """Send a request and return its JSON; raise a typed error for an error answer.

        Safe requests (GET) and requests with an Idempotency-Key are retried on connection errors,
        429, 409 and 5xx with exponential backoff and the same key; others only when the connection
        failed before anything was sent. `files` ({field: (name, open file, type)}) and `data` make a
        multipart body; the files are streamed, from their start on every attempt.
        """
        url = path if path.startswith("http") else f"{API_PREFIX}/{path.lstrip('/')}"
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        retryable = method == "GET" or idempotency_key is not None
        body = {"files": files, "data": data} if files else {"json": json}
        if timeout is not None:
            body["timeout"] = timeout
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            for _, file, *_ in (files or {}).values():
                file.seek(0)
            try:
                response = self.http.request(method, url, params=clean(params), headers=headers, **body)
            except httpx.ConnectError as error:
                if last:
                    raise errors.APIConnectionError(f"Can't reach {self.url}: {error}") from error
                self.sleep(attempt)
                continue
            except httpx.TransportError as error:  # sent, maybe processed: only safe to resend with a key
                if last or not retryable:
                    raise errors.APIConnectionError(f"The connection to {self.url} failed: {error}") from error
                self.sleep(attempt)
                continue
            if response.status_code in RETRY_STATUSES and retryable and not last:
                self.sleep(attempt, retry_after(response))
                continue
            return self.answer(response)
        raise AssertionError("unreachable")

    def answer(self, response: httpx.Response) -> Any:
        if response.status_code == 204:
            return None
        try:
            body = response.json()
        except ValueError:
            body = response.text
        if response.status_code >= 400:
            raise errors.error_for(response.status_code, body, retry_after(response))
        return body

    def sleep(self, attempt: int, at_least: float | None = None) -> None:
        delay = self.backoff * (2**attempt) * (0.5 + random.random() / 2)
        time.sleep(max(delay, min(at_least or 0, 60)))

    def get(self, path: str, **params) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: dict | None = None, *, idempotency_key: str | None = None) -> Any:
        return self.request("POST", path, json=body or {}, idempotency_key=idempotency_key)

    def pages(self, path: str, **params) -> Iterator[dict]:
        """Every item of a paginated list, following `next` links."""
        page = self.get(path, **params)
        while True:
            yield from page["results"] if isinstance(page, dict) else page
            if not isinstance(page, dict) or not page.get("next"):
                return
            page = self.request("GET", page["next"])

    # -- catalog and account ---------------------------------------------------------------------

    def chips(self) -> list[dict]:
        return self.get("chips/")

    def pools(self) -> list[dict]:
        return list(self.pages("pools/"))

    def account(self) -> dict:
        return self.get("account/")

    def ledger(self, limit: int = 50) -> list[dict]:
        return self.get("ledger/")["results"][:limit]

    def usage(self, group: str = "job", since: str | None = None, until: str | None = None) -> dict:
        return self.get("usage/", group=group, since=since, until=until)

    def topup(self, amount: str, idempotency_key: str | None = None) -> dict:
        return self.post("topups/", {"amount": str(amount)}, idempotency_key=idempotency_key or new_key())

    def price_history(self, chip: str) -> list[dict]:
        return list(self.pages("prices/history/", chip=chip))

    # -- jobs ---------------------------------------------------------------------------------------

    def quote(
        self,
        spec: Mapping[str, Any],
        *,
        hyperparameters: Hyperparameters | Mapping[str, Any] | None = None,
        n_epochs: float | None = None,
    ) -> dict:
        """The plan a job with this spec would get now; with `n_epochs` its `steps` say how many steps that is."""
        return self.post("quotes/", job_body(spec, hyperparameters=hyperparameters, n_epochs=n_epochs))

    def create_job(
        self,
        spec: Mapping[str, Any],
        idempotency_key: str | None = None,
        *,
        hyperparameters: Hyperparameters | Mapping[str, Any] | None = None,
        n_epochs: float | None = None,
    ) -> dict:
        """Submit a job; retries reuse one Idempotency-Key, so a lost answer can't start a second job.

        `hyperparameters` (a starverse.Hyperparameters or a mapping) and `n_epochs` (passes over your dataset,
        instead of the spec's `max_steps`) go into the spec; a bad value is a ValidationError whose `field`
        names it (`hyperparameters.learning_rate`).
        """
        body = job_body(spec, hyperparameters=hyperparameters, n_epochs=n_epochs)
        return self.post("jobs/", body, idempotency_key=idempotency_key or new_key())

    def jobs(self, status: str | None = None, limit: int | None = None) -> list[dict]:
        found = []
        for job in self.pages("jobs/", status=status):
            found.append(job)
            if limit and len(found) >= limit:
                break
        return found

    def job(self, job_id: int) -> dict:
        return self.get(f"jobs/{int(job_id)}/")

    def cancel_job(self, job_id: int, idempotency_key: str | None = None) -> dict:
        return self.post(f"jobs/{int(job_id)}/cancel/", idempotency_key=idempotency_key or new_key())

    def continue_job(
        self,
        job_id: int,
        *,
        checkpoint_step: int | None = None,
        max_steps: int | None = None,
        additional_steps: int | None = None,
        idempotency_key: str | None = None,
        **changes: Any,
    ) -> dict:
        """A new job that goes on from a finished job's checkpoint (the last one unless `checkpoint_step`), to
        `max_steps` in all or `additional_steps` more; `changes` are job spec fields (max_budget, chip_counts,
        policy, hyperparameters...) that replace the old job's. Returns the new job."""
        asked = {"checkpoint_step": checkpoint_step, "max_steps": max_steps, "additional_steps": additional_steps}
        body = job_body({**{key: value for key, value in asked.items() if value is not None}, **changes})
        return self.post(f"jobs/{int(job_id)}/continue/", body, idempotency_key=idempotency_key or new_key())

    def job_logs(self, job_id: int, after: int = 0, limit: int = 200) -> list[dict]:
        return self.get(f"jobs/{int(job_id)}/logs/", after=after, limit=limit)

    def job_events(self, job_id: int) -> list[dict]:
        return self.get(f"jobs/{int(job_id)}/events/")

    def job_metrics(self, job_id: int, since_step: int = 0) -> dict:
        return self.get(f"jobs/{int(job_id)}/metrics/", since_step=since_step)

    # -- models -------------------------------------------------------------------------------------

    def models(self) -> list[dict]:
        """The built-in models and your uploads; a job trains one by its `reference`."""
        return self.get("models/")

    def model(self, model_id: int) -> dict:
        """One of your uploads, with its config.json and shape."""
        return self.get(f"models/{int(model_id)}/")

    def find_model(self, name: str) -> dict:
        """The model a job would train by this name (llama-tiny, model:7, org/name), checked by the platform.

        A Hugging Face Hub id is found only in the platform's Hugging Face cache (it downloads nothing);
        a name it can't train raises ValidationError saying what would do.
        """
        return self.get("models/", name=name)[0]

    def upload_model(self, path: str | Path, name: str | None = None) -> dict:
        """Upload a Hugging Face model folder (config.json, safetensors weights, tokenizer) or an archive of one.

        A folder is packed into a .tar.gz in a temporary file (links are stored as the files they point
        to) and streamed; a file (.tar.gz, .tgz, .tar, .zip) is sent as it is. Returns the model: train it
        by its `reference` (model:<id>). The platform checks it in full first; a refusal is a
        ValidationError naming the problem, one over the size limit an APIError with status 413.
        """
        source = Path(path).expanduser()
        if source.is_dir():
            folder_name = source.resolve().name or "model"
            with tempfile.TemporaryDirectory(prefix="starverse-upload-") as scratch:
                archive = pack_folder(source, Path(scratch) / f"{folder_name}.tar.gz")
                return self.send_model(archive, name or folder_name)
        if not source.is_file():
            raise FileNotFoundError(f"No model folder or archive at {source}.")
        return self.send_model(source, name)

    def send_model(self, archive: Path, name: str | None) -> dict:
        with open(archive, "rb") as file:
            return self.request(
                "POST",
                "models/",
                files={"file": (archive.name, file, "application/octet-stream")},
                data={"name": name} if name else None,
                timeout=httpx.Timeout(self.http.timeout.connect, read=UPLOAD_READ_TIMEOUT_S),
            )

    def download_model(self, job_id: int, target: str | Path, *, merged: bool = False) -> Path:
        """Download a job's trained model and unpack it into `target` (created); returns the model folder.

        The folder holds config.json, the safetensors weights, the tokenizer and a README.md model card
        (for a LoRA job the peft adapter, or with `merged` the base model with the adapter merged in), so
        `AutoModelForCausalLM.from_pretrained(folder)` loads it. The archive streams to a temporary file
        first; members that would land outside `target` are refused.
        """
        return self.download_tar(f"jobs/{int(job_id)}/model/", target, {"merged": "true"} if merged else None)

    def delete_model(self, model_id: int) -> None:
        """Delete one of your uploads (refused, 409, while a job that hasn't ended trains it)."""
        self.request("DELETE", f"models/{int(model_id)}/")

    # -- spot bids ----------------------------------------------------------------------------------

    def bids(self, status: str | None = None, job: int | None = None) -> list[dict]:
        return list(self.pages("bids/", status=status, job=job))

    def bid(self, bid_id: int) -> dict:
        return self.get(f"bids/{int(bid_id)}/")

    def create_bid(self, job: int, chip: str, chips: int, max_price: str, idempotency_key: str | None = None) -> dict:
        body = {"job": int(job), "chip": chip, "chips": int(chips), "max_price": str(max_price)}
        return self.post("bids/", body, idempotency_key=idempotency_key or new_key())

    def update_bid(self, bid_id: int, *, confirm: bool = False, **changes) -> dict:
        """Raise or lower a bid. A change that would move its running job raises MoveNotConfirmed (409, saying
        where the job would go) unless `confirm=True`. The answer's `warnings` flag a price above on-demand."""
        body = {key: str(value) if key == "max_price" else value for key, value in changes.items()}
        if confirm:
            body["confirm"] = True
        return self.request("PATCH", f"bids/{int(bid_id)}/", json=body)

    def cancel_bid(self, bid_id: int, *, confirm: bool = False) -> dict:
        """Cancel a bid; one whose job runs on its chips raises MoveNotConfirmed unless `confirm=True`."""
        return self.post(f"bids/{int(bid_id)}/cancel/", {"confirm": True} if confirm else None)

    def bid_advice(self, chip: str, bid: str | None = None, *, days: int | None = None) -> dict:
        """For a chip type (and a bid, ¥ per chip-hour): the spot price now, the floor, the on-demand price,
        the expected uninterrupted hours at that bid from the price history, and the curve of hours by bid."""
        return self.get("market/advice/", chip=chip, bid=None if bid is None else str(bid), days=days)

    # -- tokens -------------------------------------------------------------------------------------

    def tokens(self) -> list[dict]:
        return list(self.pages("tokens/"))

    def revoke_token(self, token_id: int) -> None:
        self.request("DELETE", f"tokens/{int(token_id)}/")


def create_token(
    url: str, username: str, password: str, *, name: str = "starverse CLI", otp: str | None = None, **kwargs
) -> dict:
    """Exchange a username (or e-mail) and password for a new API token (its secret is in `token`).

    An account with two-factor on raises TwoFactorRequired without `otp`, its authenticator app's code.
    """
    body = {"username": username, "password": password, "name": name, **({"otp": otp} if otp else {})}
    with Client(url, need_key=False, **kwargs) as client:
        return client.post("tokens/", body)


def upload_model(path: str | Path, name: str | None = None, *, client: Client | None = None) -> dict:
    """Upload a Hugging Face model folder or archive with the configured platform; see Client.upload_model."""
    if client is not None:
        return client.upload_model(path, name)
    with Client() as configured:
        return configured.upload_model(path, name)


def pack_folder(folder: Path, archive: Path) -> Path:
    """The folder's contents in a .tar.gz (fast compression: weights hardly compress), links resolved."""
    with tarfile.open(archive, "w:gz", compresslevel=1, dereference=True) as tar:
        for child in sorted(folder.iterdir()):
            tar.add(child, arcname=child.name)
    return archive


def job_body(spec: Mapping[str, Any], **fields: Any) -> dict:
    """A job spec as the API takes it: `fields` given (not None) added, hyperparameters as a mapping."""
    body = {**spec, **{key: value for key, value in fields.items() if value is not None}}
    if body.get("hyperparameters") is not None:
        body["hyperparameters"] = hyperparameters_body(body["hyperparameters"])
    return body


def new_key() -> str:
    return f"sdk-{uuid.uuid4()}"


def retry_after(response: httpx.Response) -> float | None:
    try:
        return float(response.headers.get("Retry-After", ""))
    except ValueError:
        return None


def clean(params: dict | None) -> dict | None:
    return {key: value for key, value in params.items() if value is not None} if params else None
