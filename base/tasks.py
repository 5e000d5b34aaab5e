"""Celery tasks of the base app: housekeeping every app's API relies on."""

from __future__ import annotations

from celery import shared_task

from base.models import IdempotentRequest


@shared_task(ignore_result=True)
def purge_idempotency_keys() -> int:
    """Forget Idempotency-Keys past their 24 hours (a retry after that is a new request)."""
    return IdempotentRequest.purge_expired()
