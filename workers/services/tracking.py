"""A job's experiment tracking settings: W&B and MLflow besides TensorBoard (docs/FINE_TUNING.md, "Tracking").

The owner's W&B API key and MLflow token are secrets. On the job's row (`Job.tracking`) each is a Fernet token
(AES-128-CBC with an HMAC-SHA256: encrypted and authenticated) under a key derived from DJANGO_SECRET_KEY, so a
database dump or backup doesn't hold them in the clear; Django's signing would only sign them, readable by
anyone who sees the row. They are decrypted only to build the START command of the one rank that logs
(`launch_tracking`), and the API and pages show only that one is set (`public_tracking`: "api_key_set").
"""

from __future__ import annotations

import base64
from collections.abc import Mapping

from cryptography.fernet import Fernet, InvalidToken
from django.utils.crypto import salted_hmac

SALT = "starverse.tracking-secrets"
SECRETS = {"wandb": "api_key", "mlflow": "token"}  # each service's one secret setting


def _fernet() -> Fernet:
    key = salted_hmac(SALT, "fernet-key", algorithm="sha256").digest()  # 32 bytes from DJANGO_SECRET_KEY
    return Fernet(base64.urlsafe_b64encode(key))


def seal(tracking: Mapping | None) -> dict:
    """Validated settings as the job's row keeps them: each secret encrypted, empty services left out."""
    sealed = {}
    for service, settings in (tracking or {}).items():
        if not settings:
            continue
        settings = {name: value for name, value in settings.items() if value not in (None, "")}
        secret = SECRETS[service]
        if settings.get(secret):
            settings[secret] = _fernet().encrypt(settings[secret].encode()).decode()
        sealed[service] = settings
    return sealed


def public_tracking(sealed: Mapping | None) -> dict:
    """What the API and pages show: every setting but the secrets, and whether each secret is set."""
    shown = {}
    for service, settings in (sealed or {}).items():
        secret = SECRETS.get(service)
        shown[service] = {name: value for name, value in settings.items() if name != secret}
        shown[service][f"{secret}_set"] = bool(settings.get(secret))
    return shown


def launch_tracking(sealed: Mapping | None) -> dict | None:
    """The logging rank's RankLaunch.tracking: the settings with each secret decrypted; None without any.

    A secret that no longer decrypts (DJANGO_SECRET_KEY was changed) is left out: that service then runs
    without it (W&B offline runs need none; a server that wants one says so in the run's tracking event)."""
    if not sealed:
        return None
    opened = {}
    for service, settings in sealed.items():
        secret = SECRETS.get(service)
        settings = dict(settings)
        if settings.get(secret):
            try:
                settings[secret] = _fernet().decrypt(settings[secret].encode()).decode()
            except InvalidToken:
                settings.pop(secret)
        opened[service] = settings
    return opened
