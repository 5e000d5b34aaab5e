"""A stand-in for the v1 API's datasets, checkpoints, TensorBoard, quotes and jobs, as an httpx transport: the SDK's
and the CLI's tests run against it in-process (no live server), and it records what each request sent.

Its answers follow the API's contract (workers/api/urls.py, job_views.py, checkpoint_views.py): the same paths,
statuses, JSON and error format ({"detail", "code", "errors"}); the live-server tests check the real thing.
"""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import dataclass, field

import httpx

CREATED = "2026-03-01T12:00:00Z"
RETENTION = {"keep_periodic": 3, "prune_every_s": 600, "policy": "Keeps the 3 newest periodic checkpoints."}


def tar_of(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def checkpoint_row(job: int, step: int, *, loss: float, deletable: bool = True) -> dict:
    return {
        "step": step,
        "loss": loss,
        "eval_loss": None,
        "created_at": CREATED,
        "size_bytes": 2_500_000,
        "stopping": False,
        "kept": "latest" if not deletable else "recent",
        "kept_because": "",
        "deletable": deletable,
        "download_url": f"http://sv.test/api/v1/jobs/{job}/checkpoints/{step}/download/",
    }


def error(status: int, detail: str, code: str = "", errors: dict | None = None) -> httpx.Response:
    body: dict = {"detail": detail}
    if code:
        body["code"] = code
    if errors is not None:
        body["errors"] = errors
    return httpx.Response(status, json=body)


@dataclass
class FakeAPI:
    """Job 7 has checkpoints 40 (in use) and 20; datasets are kept as uploaded; a learning rate over 1 is a 400."""

    datasets: dict[int, dict] = field(default_factory=dict)
    checkpoints: dict[int, dict] = field(
        default_factory=lambda: {
            40: checkpoint_row(7, 40, loss=1.25, deletable=False),
            20: checkpoint_row(7, 20, loss=2.5),
        }
    )
    requests: list[httpx.Request] = field(default_factory=list)

    def last_call(self) -> tuple[str, str]:
        return self.requests[-1].method, self.requests[-1].url.path

    def last_json(self) -> dict:
        return json.loads(self.requests[-1].content or b"{}")

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        parts = request.url.path.removeprefix("/api/v1/").strip("/").split("/")
        method = request.method
        if parts[0] == "datasets":
            return self.dataset_call(method, parts, request)
        if parts[0] in ("quotes", "jobs") and len(parts) == 1 and method == "POST":
            return self.spec_call(parts[0], json.loads(request.content))
        if parts[:1] == ["jobs"] and parts[1] == "7":
            return self.job_call(method, parts[2:], request)
        if parts[:1] == ["jobs"]:
            return error(404, f"You have no job {parts[1]}.")
        return error(404, f"No API endpoint at {request.url.path}")

    def dataset_call(self, method: str, parts: list[str], request: httpx.Request) -> httpx.Response:
        if method == "POST":
            body = request.read()
            if b'filename="bad.jsonl"' in body:
                return error(400, "Invalid input: file.", "invalid", {"file": ["Line 2 is not JSON."]})
            number = len(self.datasets) + 1
            name = "my corpus" if b'name="name"\r\n\r\nmy corpus' in body else "corpus.jsonl"
            row = {"id": number, "reference": f"upload:{number}", "name": name, "kind": "jsonl", "size_bytes": 42}
            self.datasets[number] = {**row, "samples": 2, "created_at": CREATED}
            return httpx.Response(201, json=self.datasets[number])
        if method == "GET" and len(parts) == 1:
            rows = list(self.datasets.values())
            return httpx.Response(200, json={"count": len(rows), "next": None, "previous": None, "results": rows})
        number = int(parts[1])
        if number not in self.datasets:
            return error(404, "No Dataset matches the given query.")
        if method == "DELETE":
            del self.datasets[number]
            return httpx.Response(204)
        return httpx.Response(200, json=self.datasets[number])

    def spec_call(self, kind: str, spec: dict) -> httpx.Response:
        if (spec.get("hyperparameters") or {}).get("learning_rate", 0) > 1:
            message = "Ensure this value is less than or equal to 1.0."
            errors = {"hyperparameters": {"learning_rate": [message]}}
            return error(400, "Invalid input: hyperparameters.", "max_value", errors)
        steps = int(spec["n_epochs"] * 50) if spec.get("n_epochs") else spec.get("max_steps")
        plan = {"model": spec["model"], "policy": "cost-performance", "chip_counts": {"rtx-4090": {"on_demand": 2}},
                "tokens_per_s": 1000.0, "price_per_hour": "3.00", "eta_seconds": 120.0, "total_cost": "0.10",
                "tokens_per_step": 4096, "steps": steps}  # fmt: skip
        if kind == "quotes":
            return httpx.Response(200, json=plan)
        job = {"id": 9, "name": "", "status": "queued", "model": spec["model"], "dataset": spec.get("dataset"),
               "max_steps": steps, "n_epochs": spec.get("n_epochs"), "step": 0, "cost": "0.00", "plan": plan,
               "hyperparameters": {"learning_rate": 2e-4, "lr_scheduler": "cosine", **spec.get("hyperparameters", {})},
               "tracking": {}, "created_at": CREATED, "started_at": None}  # fmt: skip
        return httpx.Response(201, json=job)

    def job_call(self, method: str, rest: list[str], request: httpx.Request) -> httpx.Response:
        if rest == ["checkpoints"]:
            rows = [self.checkpoints[step] for step in sorted(self.checkpoints, reverse=True)]
            return httpx.Response(200, json={"retention": RETENTION, "checkpoints": rows})
        if rest == ["tensorboard"]:
            return httpx.Response(200, content=tar_of({"job-7-tensorboard/epoch-0/events.out.tfevents.1": b"tb"}))
        if rest == ["events"]:
            event = {"id": 3, "kind": "checkpoint", "message": "Saved step 20", "data": {"step": 20}, "epoch": 0}
            return httpx.Response(200, json=[{**event, "created_at": CREATED}])
        if rest[:1] == ["checkpoints"]:
            step = int(rest[1])
            if step not in self.checkpoints:
                return error(404, f"Job 7 has no checkpoint {step}; it has 20, 40.", "checkpoint_not_found")
            if rest[2:] == ["download"]:
                suffix = "-merged" if request.url.params.get("merged") == "true" else ""
                folder = f"job-7-step-{step}-model{suffix}"
                files = {f"{folder}/config.json": b"{}", f"{folder}/README.md": b"#"}
                return httpx.Response(200, content=tar_of(files))
            if method == "DELETE":
                if not self.checkpoints[step]["deletable"]:
                    return error(409, "Job 7 resumes from this checkpoint.", "checkpoint_in_use")
                del self.checkpoints[step]
                return httpx.Response(204)
        return error(404, "No API endpoint.")


def starverse_cli(capsys, *args: str) -> tuple[int, str, str]:
    """Run the CLI in-process: its exit code, stdout and stderr."""
    from starverse import cli

    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err
