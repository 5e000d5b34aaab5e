"""Create the operator login on the first run and show its password once, to the terminal only."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from allauth.account.models import EmailAddress
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from portal.env import env

PASSWORD_FILE = "operator-password.txt"


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (0600), in a folder only its owner can enter (0700)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an older copy may have had another mode
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


class Command(BaseCommand):
    help = "Create the operator (admin) account if there is none, showing its password once."

    def handle(self, *args, **options) -> None:
        User = get_user_model()
        if User.objects.filter(is_superuser=True).exists():
            return
        username = env("STARVERSE_OPERATOR_USERNAME", "operator")
        password = env("STARVERSE_OPERATOR_PASSWORD") or secrets.token_urlsafe(12)
        operator = User.objects.create_superuser(
            username=username, email=f"{username}@starverse.local", password=password
        )
        # The platform chose this address, so it counts as verified: the operator can sign in (sign-in
        # needs a verified address) and add two-factor authentication.
        EmailAddress.objects.create(user=operator, email=operator.email, primary=True, verified=True)
        self.show_once(username, password)

    def show_once(self, username: str, password: str) -> None:
        """On a terminal, print the password; anywhere else (a log file, a pipe) only where to find it."""
        if self.stdout.isatty():
            self.stdout.write(
                self.style.SUCCESS(
                    "\n  Operator login (shown once, keep it):\n"
                    f"    username: {username}\n    password: {password}\n    console:  /admin/\n"
                )
            )
            return
        path = Path(settings.DATA_DIR) / PASSWORD_FILE
        write_private(path, f"username: {username}\npassword: {password}\n")
        self.stdout.write(
            self.style.SUCCESS(
                f"\n  Operator login: username {username}; the password is in {path}\n"
                "  (readable only by you; output is not a terminal, so it is not printed). Console: /admin/\n"
            )
        )
