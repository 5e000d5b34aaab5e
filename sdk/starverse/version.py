"""The installed package's version, from its metadata (what `pip install` recorded), read once."""

from __future__ import annotations

from importlib import metadata

try:
    VERSION = metadata.version("starverse")
except metadata.PackageNotFoundError:  # imported from a source tree that was never installed
    VERSION = "0+unknown"
