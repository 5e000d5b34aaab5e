"""Mail comes from EMAIL_URL or the EMAIL_* variables; Sentry starts only when SENTRY_DSN is set."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from launcher.private import mail_to_private_files
from portal.mail_settings import CONSOLE, SMTP, mail_settings

REPO = Path(__file__).resolve().parents[2]
MAIL_VARIABLES = [name for name in os.environ if name.startswith("EMAIL_")] + ["DEFAULT_FROM_EMAIL"]


@pytest.fixture
def mail_env(monkeypatch, tmp_path):
    """No mail variables but the ones a test sets; returns a setter."""
    for name in MAIL_VARIABLES:
        monkeypatch.delenv(name, raising=False)

    def set_env(**values: str) -> dict:
        for name, value in values.items():
            monkeypatch.setenv(name, value)
        return mail_settings(tmp_path)

    return set_env


def test_without_configuration_mail_goes_to_the_console(mail_env):
    mail = mail_env()
    assert mail["EMAIL_BACKEND"] == CONSOLE
    assert mail["DEFAULT_FROM_EMAIL"] == "Starverse <noreply@starverse.local>"


def test_an_smtp_url_sets_host_port_user_password_and_tls(mail_env):
    mail = mail_env(EMAIL_URL="smtp://mailer%40example.com:p%40ss@smtp.example.com:587/?tls=True")
    assert mail["EMAIL_BACKEND"] == SMTP
    assert (mail["EMAIL_HOST"], mail["EMAIL_PORT"]) == ("smtp.example.com", 587)
    assert (mail["EMAIL_HOST_USER"], mail["EMAIL_HOST_PASSWORD"]) == ("mailer@example.com", "p@ss")
    assert (mail["EMAIL_USE_TLS"], mail["EMAIL_USE_SSL"], mail["EMAIL_TIMEOUT"]) == (True, False, 10)


def test_the_url_can_name_the_sender_and_an_ssl_port(mail_env):
    mail = mail_env(EMAIL_URL="smtp://smtp.example.com:465/?ssl=True&_default_from_email=ops@example.com")
    assert (mail["EMAIL_USE_SSL"], mail["EMAIL_USE_TLS"], mail["EMAIL_PORT"]) == (True, False, 465)
    assert mail["DEFAULT_FROM_EMAIL"] == "ops@example.com"


def test_the_url_may_come_from_a_secret_file(mail_env, tmp_path):
    secret = tmp_path / "email-url"
    secret.write_text("submission://u:secret@smtp.example.com\n")
    mail = mail_env(EMAIL_URL_FILE=str(secret))
    assert (mail["EMAIL_BACKEND"], mail["EMAIL_PORT"], mail["EMAIL_USE_TLS"]) == (SMTP, 587, True)
    assert mail["EMAIL_HOST_PASSWORD"] == "secret"


def test_console_and_file_urls(mail_env, tmp_path):
    assert mail_env(EMAIL_URL="console://")["EMAIL_BACKEND"] == CONSOLE
    mail = mail_env(EMAIL_URL="file:///var/mail/starverse")
    assert mail["EMAIL_BACKEND"] == "django.core.mail.backends.filebased.EmailBackend"
    assert mail["EMAIL_FILE_PATH"] == "/var/mail/starverse"
    assert mail_env(EMAIL_URL="file://")["EMAIL_FILE_PATH"] == str(tmp_path / "mail")


def test_the_url_wins_over_the_single_variables(mail_env):
    mail = mail_env(EMAIL_URL="smtp://a.example.com:2525", EMAIL_BACKEND=CONSOLE, EMAIL_HOST="b.example.com")
    assert (mail["EMAIL_BACKEND"], mail["EMAIL_HOST"], mail["EMAIL_PORT"]) == (SMTP, "a.example.com", 2525)


@pytest.mark.parametrize(
    ("url", "message"),
    [("smpt://typo.example.com", "unknown scheme 'smpt'"), ("smtp://host:notaport", "not a valid mail URL")],
)
def test_a_bad_url_is_a_configuration_error_saying_what_is_wrong(mail_env, url, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        mail_env(EMAIL_URL=url)


def test_single_variables_and_a_host_alone_mean_smtp(mail_env):
    mail = mail_env(EMAIL_HOST="smtp.example.com", EMAIL_PORT="587", EMAIL_USE_TLS="true", EMAIL_HOST_USER="u")
    assert (mail["EMAIL_BACKEND"], mail["EMAIL_HOST"], mail["EMAIL_PORT"]) == (SMTP, "smtp.example.com", 587)
    assert (mail["EMAIL_USE_TLS"], mail["EMAIL_HOST_USER"]) == (True, "u")


def test_make_run_off_a_terminal_still_writes_mail_to_private_files(mail_env, tmp_path):
    environ: dict[str, str] = {}
    folder = mail_to_private_files(tmp_path, stdout=io.StringIO(), environ=environ)  # output is not a terminal
    assert folder == tmp_path / "mail"
    for name, value in environ.items():
        os.environ[name] = value
    try:
        mail = mail_settings(tmp_path)
    finally:
        for name in environ:
            del os.environ[name]
    assert (mail["EMAIL_BACKEND"], mail["EMAIL_FILE_PATH"]) == (
        "django.core.mail.backends.filebased.EmailBackend",
        str(tmp_path / "mail"),
    )
    assert mail_to_private_files(tmp_path, stdout=io.StringIO(), environ={"EMAIL_URL": "console://"}) is None


SENTRY_PROBE = """
import json, django
django.setup()
import sentry_sdk
from django.conf import settings
client = sentry_sdk.get_client()
print(json.dumps({"enabled": settings.SENTRY_ENABLED, "active": client.is_active(),
                  "integrations": sorted(getattr(client, "integrations", {}) or {})}))
"""


def settings_in_a_fresh_process(**variables: str) -> dict:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SENTRY_")}
    env.update(variables)
    done = subprocess.run(
        [sys.executable, "-c", SENTRY_PROBE], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_sentry_starts_with_django_and_celery_when_a_dsn_is_set():
    # A DSN on loopback: nothing is sent unless an event happens, and none does here.
    probe = settings_in_a_fresh_process(SENTRY_DSN="https://public@127.0.0.1:9/1", SENTRY_ENVIRONMENT="test")
    assert probe["enabled"] and probe["active"]
    assert {"django", "celery"} <= set(probe["integrations"])


def test_sentry_stays_off_without_a_dsn():
    probe = settings_in_a_fresh_process()
    assert not probe["enabled"] and not probe["active"]
