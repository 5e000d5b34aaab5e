"""No hard-coded SECRET_KEY: settings refuse to load without one, unless local mode's generated key is there."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from launcher.platform import ensure_secret_key
from portal.env import secret_key

REPO = Path(__file__).resolve().parents[2]
PRINT_KEY = "import django; django.setup(); from django.conf import settings; print(settings.SECRET_KEY)"


def without_a_key(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_SECRET_KEY")}
    return {**env, "DJANGO_SETTINGS_MODULE": "portal.settings", **extra}


def load_settings(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PRINT_KEY], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def no_key_in_env(monkeypatch):
    monkeypatch.delenv("DJANGO_SECRET_KEY", raising=False)
    monkeypatch.delenv("DJANGO_SECRET_KEY_FILE", raising=False)


def test_a_process_without_a_key_refuses_to_start_and_says_what_to_set(tmp_path):
    done = load_settings(without_a_key(STARVERSE_DATA_DIR=str(tmp_path)))

    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr
    assert "set DJANGO_SECRET_KEY" in done.stderr and "DJANGO_SECRET_KEY_FILE" in done.stderr
    assert "django-insecure" not in done.stdout


def test_local_modes_generated_key_is_used_by_later_commands(tmp_path):
    ensure_secret_key(tmp_path)  # what `make run` does first, in its own environment
    generated = (tmp_path / "secret_key").read_text().strip()

    done = load_settings(without_a_key(STARVERSE_DATA_DIR=str(tmp_path)))

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == generated
    assert len(generated) >= 50


def test_the_generated_key_file_is_private_and_made_once(tmp_path, monkeypatch, no_key_in_env):
    ensure_secret_key(tmp_path)
    first = (tmp_path / "secret_key").read_text()
    ensure_secret_key(tmp_path)

    assert stat.S_IMODE((tmp_path / "secret_key").stat().st_mode) == 0o600
    assert (tmp_path / "secret_key").read_text() == first
    assert os.environ["DJANGO_SECRET_KEY_FILE"] == str(tmp_path / "secret_key")


def test_the_key_in_the_environment_wins(tmp_path, monkeypatch, no_key_in_env):
    (tmp_path / "secret_key").write_text("generated\n")
    monkeypatch.setenv("DJANGO_SECRET_KEY", "from-the-environment")

    assert secret_key(tmp_path) == "from-the-environment"


def test_a_key_file_is_read(tmp_path, monkeypatch, no_key_in_env):
    (tmp_path / "k").write_text("from-a-file\n")
    monkeypatch.setenv("DJANGO_SECRET_KEY_FILE", str(tmp_path / "k"))

    assert secret_key(tmp_path / "elsewhere") == "from-a-file"


def test_a_missing_key_file_is_refused_by_name(tmp_path, monkeypatch, no_key_in_env):
    (tmp_path / "secret_key").write_text("generated\n")
    monkeypatch.setenv("DJANGO_SECRET_KEY_FILE", str(tmp_path / "missing"))

    with pytest.raises(ImproperlyConfigured, match="missing"):
        secret_key(tmp_path)


def test_an_empty_generated_key_is_no_key(tmp_path, no_key_in_env):
    (tmp_path / "secret_key").write_text("\n")

    with pytest.raises(ImproperlyConfigured, match="DJANGO_SECRET_KEY"):
        secret_key(tmp_path)
