"""Fixtures for the serving engine tests, no Django.

Run with `pytest -p no:django -o addopts="" --confcutdir=tests/hosts tests/hosts/serving`
(the confcutdir keeps the Django-importing tests/conftest.py out of a run without Django).
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny Llama model with its BPE tokenizer and chat template (tests/support/hfmodels.py)."""
    from tests.support.hfmodels import make_model_dir

    return make_model_dir(tmp_path_factory.mktemp("serving") / "model", family="llama")
