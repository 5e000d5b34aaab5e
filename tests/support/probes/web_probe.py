"""The web tier's work on a host with only `.[web]` installed (run by test_hosts.py under without.py).

`python without.py DISTS web_probe.py ARCHIVE TOKEN USERNAME`: sets Django up, imports every module
of the apps (urls, views, admin, services, tasks, ...), runs `manage.py check`, then, as the user
of TOKEN: quotes a catalog model, uploads the model ARCHIVE and quotes it, uploads a chat dataset
and previews it in the uploaded model's tokens (its chat template). Prints one line,
`PROBE: {json}`, with what each step answered, and whether torch, deepspeed or peft could be found
or were loaded (they must not: that is what makes the probe a web host's).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import pkgutil
import runpy
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[3]
WEB_PACKAGES = ("base", "portal", "billing", "market", "workers")
# The compute hosts' own, not on the web path: the agent, the ranks, and the store as hosts reach it (httpx).
HOST_PROGRAMS = ("hosts.agent", "hosts.runtime", "kernel.storage.grants")
AGENT_ONLY = ("torch", "deepspeed", "peft")
SPEC = {"dataset": "synthetic", "per_device_batch_size": 4, "max_steps": 50, "max_budget": "28"}
CHAT = {"messages": [{"role": "user", "content": "the chip runs"}, {"role": "assistant", "content": "runs chip"}]}


def import_every_module() -> list[str]:
    imported = []
    for package in WEB_PACKAGES:
        for info in pkgutil.walk_packages(importlib.import_module(package).__path__, f"{package}."):
            if info.name.startswith(HOST_PROGRAMS) or info.name.endswith(".__main__"):
                continue
            importlib.import_module(info.name)
            imported.append(info.name)
    return imported


def manage_py_check() -> int:
    sys.argv = ["manage.py", "check"]
    try:
        runpy.run_path(str(REPOSITORY / "manage.py"), run_name="__main__")
    except SystemExit as exit:
        return int(exit.code or 0)
    return 0


def answer(response) -> dict:
    body = response.json() if response.get("Content-Type", "").startswith("application/json") else {}
    return {"status": response.status_code, "body": body}


def use_the_site(archive: str, token: str, username: str) -> dict:
    from django.contrib.auth import get_user_model
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.test import Client
    from django.test.utils import setup_test_environment
    from django.urls import reverse
    from rest_framework.test import APIClient

    setup_test_environment()  # the test client's host name, mail kept in memory
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    steps = {"catalog_quote": answer(api.post("/api/v1/quotes/", {**SPEC, "model": "llama-tiny"}, format="json"))}
    with open(archive, "rb") as file:
        steps["upload"] = answer(api.post("/api/v1/models/", {"file": file, "name": "tiny"}, format="multipart"))
    reference = steps["upload"]["body"].get("reference", "model:0")
    steps["uploaded_quote"] = answer(api.post("/api/v1/quotes/", {**SPEC, "model": reference}, format="json"))
    chat = SimpleUploadedFile("chat.jsonl", json.dumps(CHAT).encode())
    steps["dataset"] = answer(api.post("/api/v1/datasets/", {"file": chat}, format="multipart"))
    browser = Client()
    browser.force_login(get_user_model().objects.get(username=username))
    page = browser.get(reverse("datasets"), {"preview": steps["dataset"]["body"].get("id"), "tokenizer": reference})
    steps["preview"] = {"status": page.status_code, "html": page.content.decode()}
    return steps


def main() -> None:
    sys.path.insert(0, str(REPOSITORY))
    os.chdir(REPOSITORY)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    archive, token, username = sys.argv[1:4]
    result = {"imported": import_every_module(), "check": manage_py_check()}
    result.update(use_the_site(archive, token, username))
    result["findable"] = {name: importlib.util.find_spec(name) is not None for name in AGENT_ONLY}
    result["loaded"] = sorted(name for name in sys.modules if name.partition(".")[0] in AGENT_ONLY)
    print("PROBE:", json.dumps(result))


if __name__ == "__main__":
    main()
