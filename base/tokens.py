"""Bearer secrets (API tokens, node tokens, enrollment tokens) are stored only as their hash: this one."""

from __future__ import annotations

import hashlib


def hash_token(raw: str) -> str:
    """The stored form of a token: its SHA-256 in hex. A request's token is looked up by this value."""
    # Every token carries 256 bits of randomness, so a fast hash is enough (no password stretching needed).
    return hashlib.sha256(raw.encode()).hexdigest()
