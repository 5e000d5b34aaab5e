"""Celery tasks of the spot market: thin wrappers over services, safe to run twice or concurrently."""

from __future__ import annotations

from celery import shared_task

from market.services import clearing


@shared_task(ignore_result=True, soft_time_limit=30)
def clear_market(chip_type_id: int | None = None) -> None:
    """Clear one chip type's auction (after a bid change), or every one (the beat, every few seconds)."""
    if chip_type_id is None:
        clearing.clear_all()
    else:
        clearing.clear_chip_type(chip_type_id)
