"""Error reporting to Sentry, only when SENTRY_DSN is set: Django and Celery integrations, no personal data."""

from __future__ import annotations


def init_sentry(dsn: str, *, environment: str, release: str, traces_sample_rate: float) -> bool:
    """Start the Sentry SDK for this process when `dsn` is set; whether it was started."""
    if not dsn:
        return False
    import sentry_sdk
    from sentry_sdk.integrations.celery import CeleryIntegration
    from sentry_sdk.integrations.django import DjangoIntegration

    sentry_sdk.init(
        dsn=dsn,
        environment=environment or None,
        release=release or None,
        integrations=[DjangoIntegration(), CeleryIntegration()],
        traces_sample_rate=traces_sample_rate,
        send_default_pii=False,  # no user names, e-mails, cookies or request bodies leave the platform
    )
    return True
