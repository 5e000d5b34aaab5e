"""Celery tasks of the spot market, registered by name for the beat and the workers.

Each task sits beside the service it wraps, so services ask for work through their
own module and never import this one.
"""

from __future__ import annotations

from market.services.clearing import clear_market

__all__ = ["clear_market"]
