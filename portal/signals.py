"""Account lifecycle hooks."""

from __future__ import annotations

from allauth.account import app_settings
from allauth.account.signals import email_confirmed, user_signed_up
from django.dispatch import receiver

from billing.services.credits import grant_trial_credit


@receiver(email_confirmed)
def give_confirmed_users_their_trial_credit(sender, request, email_address, **kwargs) -> None:
    """The trial credit waits for a confirmed address, so made-up addresses farm nothing (#28).

    Once per account whichever address is confirmed, and however often: grant_trial_credit is keyed by user.
    """
    grant_trial_credit(email_address.user)


@receiver(user_signed_up)
def give_the_trial_credit_where_nothing_is_confirmed(sender, request, user, **kwargs) -> None:
    """With ACCOUNT_EMAIL_VERIFICATION=none no address is ever confirmed: the operator chose to trust sign-up."""
    if app_settings.EMAIL_VERIFICATION == app_settings.EmailVerificationMethod.NONE:
        grant_trial_credit(user)
