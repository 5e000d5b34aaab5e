"""Mail settings from the environment: EMAIL_URL (parsed by dj-email-url), or the EMAIL_* variables one by one.

EMAIL_URL (or the file EMAIL_URL_FILE names) wins when set:
  smtp://user:password@host:587/?tls=True    submission://user:password@host (STARTTLS, port 587)
  smtp://host:465/?ssl=True                  console://    file:///var/mail/starverse    dummy://
Otherwise EMAIL_BACKEND, EMAIL_HOST, EMAIL_PORT, EMAIL_HOST_USER, EMAIL_HOST_PASSWORD(_FILE),
EMAIL_USE_TLS, EMAIL_USE_SSL, EMAIL_TIMEOUT; setting EMAIL_HOST alone means SMTP. Neither: the console
(`make run` off a terminal sets the file backend under <data dir>/mail, launcher.private).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import dj_email_url
from django.core.exceptions import ImproperlyConfigured

from portal.env import env, env_bool, env_int, env_secret

CONSOLE = "django.core.mail.backends.console.EmailBackend"
SMTP = "django.core.mail.backends.smtp.EmailBackend"
DEFAULT_FROM = "Starverse <noreply@starverse.local>"


def mail_settings(data_dir: Path) -> dict[str, Any]:
    """Every EMAIL_* setting Django reads, and DEFAULT_FROM_EMAIL (SERVER_EMAIL when the URL names one)."""
    url = env_secret("EMAIL_URL")
    settings = from_url(url, data_dir) if url else from_variables(data_dir)
    settings.setdefault("DEFAULT_FROM_EMAIL", env("DEFAULT_FROM_EMAIL", DEFAULT_FROM))
    return settings


def from_url(url: str, data_dir: Path) -> dict[str, Any]:
    """EMAIL_URL's settings; an unknown scheme or a bad port or timeout is an ImproperlyConfigured."""
    scheme = urlsplit(url).scheme
    if scheme not in dj_email_url.SCHEMES:
        known = ", ".join(sorted(dj_email_url.SCHEMES))
        raise ImproperlyConfigured(f"EMAIL_URL: unknown scheme {scheme!r} (use one of {known}).")
    try:
        parsed = dj_email_url.parse(url)
    except ValueError as error:
        raise ImproperlyConfigured(f"EMAIL_URL is not a valid mail URL ({error}).") from None
    if scheme == "file":  # dj-email-url drops the path's leading slash: file:///var/mail would be var/mail
        path = urlsplit(url).path
        parsed["EMAIL_FILE_PATH"] = path if path not in ("", "/") else str(data_dir / "mail")
    parsed["EMAIL_HOST"] = parsed["EMAIL_HOST"] or "localhost"
    parsed["EMAIL_PORT"] = parsed["EMAIL_PORT"] or 25
    parsed["EMAIL_HOST_USER"] = parsed["EMAIL_HOST_USER"] or ""
    parsed["EMAIL_HOST_PASSWORD"] = parsed["EMAIL_HOST_PASSWORD"] or ""
    parsed["EMAIL_TIMEOUT"] = parsed["EMAIL_TIMEOUT"] or env_int("EMAIL_TIMEOUT", 10)
    return parsed


def from_variables(data_dir: Path) -> dict[str, Any]:
    host = env("EMAIL_HOST")
    return {
        "EMAIL_BACKEND": env("EMAIL_BACKEND") or (SMTP if host else CONSOLE),
        "EMAIL_FILE_PATH": env("EMAIL_FILE_PATH", str(data_dir / "mail")),
        "EMAIL_HOST": host or "localhost",
        "EMAIL_PORT": env_int("EMAIL_PORT", 25),
        "EMAIL_HOST_USER": env("EMAIL_HOST_USER", ""),
        "EMAIL_HOST_PASSWORD": env_secret("EMAIL_HOST_PASSWORD") or "",
        "EMAIL_USE_TLS": env_bool("EMAIL_USE_TLS", False),
        "EMAIL_USE_SSL": env_bool("EMAIL_USE_SSL", False),
        "EMAIL_TIMEOUT": env_int("EMAIL_TIMEOUT", 10),
    }
