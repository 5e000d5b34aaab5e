"""Fixtures for the training runtime tests (helpers to run real rank processes: tests/support/ranks.py), no Django.

Run with `pytest -p no:django -o addopts="" --confcutdir=tests/hosts/runtime tests/hosts/runtime`
(the confcutdir keeps the Django-importing tests/conftest.py out of a run without Django).
"""

from __future__ import annotations

import pytest

from tests.support.ranks import TINY


@pytest.fixture
def tiny() -> dict:
    return dict(TINY)
