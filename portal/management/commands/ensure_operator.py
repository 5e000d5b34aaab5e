"""Create the operator login on the first run and print it once."""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from portal.env import env


class Command(BaseCommand):
    help = "Create the operator (admin) account if there is none, printing its password once."

    def handle(self, *args, **options) -> None:
        User = get_user_model()
        if User.objects.filter(is_superuser=True).exists():
            return
        username = env("STARVERSE_OPERATOR_USERNAME", "operator")
        password = env("STARVERSE_OPERATOR_PASSWORD") or secrets.token_urlsafe(12)
        User.objects.create_superuser(username=username, email=f"{username}@starverse.local", password=password)
        self.stdout.write(
            self.style.SUCCESS(
                "\n  Operator login (shown once, keep it):\n"
                f"    username: {username}\n    password: {password}\n    console:  /admin/\n"
            )
        )
