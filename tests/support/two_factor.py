"""Two-factor helpers: turn TOTP on for a user as allauth's page does, and the code an authenticator app shows.

Codes depend on the clock: freeze it (time_machine, tick=False) around computing a code and using it, so a
30-second step boundary can't fall between the two.
"""

from __future__ import annotations

import time

from allauth.mfa.recovery_codes.internal.auth import RecoveryCodes
from allauth.mfa.totp.internal.auth import TOTP, format_hotp_value, generate_totp_secret, hotp_value


def turn_on_totp(user) -> str:
    """An authenticator app for `user` (allauth's own activation); returns its secret."""
    secret = generate_totp_secret()
    TOTP.activate(user, secret)
    return secret


def totp_code(secret: str, offset: int = 0) -> str:
    """The code the app shows now (`offset` steps of 30 s later or earlier)."""
    return format_hotp_value(hotp_value(secret, int(time.time()) // 30 + offset))


def wrong_code(secret: str) -> str:
    return f"{(int(totp_code(secret)) + 1) % 1_000_000:06d}"


def recovery_code(user) -> str:
    """One of `user`'s recovery codes (made on first use), which, unlike an app's code, doesn't depend on the clock."""
    codes = RecoveryCodes.activate(user)
    return codes.get_unused_codes()[0]
