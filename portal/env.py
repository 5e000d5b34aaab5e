"""Small typed helpers that read settings from the environment."""

from __future__ import annotations

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured


def env(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.strip() else default


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_secret(name: str, default: str = "") -> str:
    """A secret from `NAME`, or from the file that `NAME_FILE` points to (Docker/K8s secrets)."""
    if os.environ.get(name):
        return os.environ[name]
    path = os.environ.get(f"{name}_FILE")
    if path and Path(path).is_file():
        return Path(path).read_text().strip()
    return default


def secret_key(data_dir: Path) -> str:
    """DJANGO_SECRET_KEY (or the file DJANGO_SECRET_KEY_FILE names), else local mode's generated key.

    `make run` writes a random key to <data dir>/secret_key once (and passes DJANGO_SECRET_KEY_FILE);
    `manage.py` run later finds it there. Without any of these there is no key to fall back on: a
    known one would let anyone forge sessions and password-reset links.
    """
    if key := env_secret("DJANGO_SECRET_KEY"):
        return key
    named = os.environ.get("DJANGO_SECRET_KEY_FILE")
    if named:
        raise ImproperlyConfigured(f"DJANGO_SECRET_KEY_FILE={named} is not a readable file holding the secret key.")
    generated = data_dir / "secret_key"
    key = generated.read_text().strip() if generated.is_file() else ""
    if key:
        return key
    raise ImproperlyConfigured(
        "No secret key: set DJANGO_SECRET_KEY (a long random string, e.g. from "
        "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`) or DJANGO_SECRET_KEY_FILE (a file "
        f"holding one). `make run` generates one into {generated} for local mode."
    )


def find_program(name: str) -> str:
    """A program beside this Python (a virtualenv's bin/) or on PATH; "" when neither has it."""
    import shutil
    import sys

    here = Path(sys.executable).parent
    return shutil.which(name, path=os.pathsep.join([str(here), os.environ.get("PATH", "")])) or ""
