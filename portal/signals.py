"""Account lifecycle hooks."""

from __future__ import annotations

from allauth.account.signals import user_signed_up
from django.dispatch import receiver

from billing.services.credits import grant_trial_credit


@receiver(user_signed_up)
def give_new_users_their_trial_credit(sender, request, user, **kwargs) -> None:
    grant_trial_credit(user)
