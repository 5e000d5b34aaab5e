"""Periodic billing work; each task is a thin wrapper over a service."""

from __future__ import annotations

import logging

from celery import shared_task

from billing.services.ledger import audit_ledger as find_ledger_problems

logger = logging.getLogger(__name__)


@shared_task
def audit_ledger() -> int:
    """Check that every currency's entries sum to zero and balances equal their entries."""
    problems = find_ledger_problems()
    for problem in problems:
        logger.error("ledger audit: %s", problem)
    return len(problems)
