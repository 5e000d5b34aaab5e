"""The token API's sign-in makes every check the login page makes: lockout, a confirmed e-mail, two-factor.

`POST /api/v1/tokens/` exchanged a password for a token, so an account that had not confirmed its
address, or that had two-factor on, got a token with the password alone (#28, docs/RELIABILITY.md #35).
Each check here is allauth's own: its authenticate (the lockout), its verification setting, its TOTP and
recovery-code form (with its per-account limit on wrong codes and its refusal of a code used twice).
"""

from __future__ import annotations

from allauth.account import app_settings
from allauth.account.adapter import get_adapter
from allauth.account.utils import has_verified_email
from allauth.mfa.base.forms import AuthenticateForm
from allauth.mfa.utils import is_mfa_enabled
from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from rest_framework.exceptions import AuthenticationFailed, Throttled

from portal.accounts import locked_out, lockout_retry_after, two_factor_retry_after


class SignInRefused(AuthenticationFailed):
    """A 401 whose answer carries its `code` (base.api.errors), for a client to act on: `two_factor_required`
    (ask for the code and send it again), `two_factor_invalid`, `email_unconfirmed`."""

    answer_with_code = True


UNCONFIRMED = gettext_lazy(
    "Confirm your e-mail address first: open the link in the mail we sent when you signed up (signing in on "
    "the site sends a new one). Until then this account gets no token and its tokens don't work."
)


def sign_in(request, username: str, password: str, otp: str | None):
    """The user these credentials sign in, or the exception the login page's refusal maps to."""
    user = authenticate_with_lockout(request, username, password)
    if user is None or not user.is_active:
        raise AuthenticationFailed(_("Invalid username or password."))
    if not is_confirmed(user):
        raise SignInRefused(UNCONFIRMED, code="email_unconfirmed")
    check_two_factor(request, user, otp)
    return user


def authenticate_with_lockout(request, username: str, password: str):
    """Check a password through allauth, so API attempts count toward the login page's lockout.

    The lock is per account and address (portal.accounts); a locked attempt is a 429 with Retry-After
    (docs/RELIABILITY.md #22).
    """
    try:
        return get_adapter(request._request).authenticate(request._request, username=username, password=password)
    except DjangoValidationError:
        raise Throttled(
            wait=lockout_retry_after(request._request, username),
            detail=_("Too many failed sign-in attempts for this account; try again in a few minutes."),
        ) from None


def is_confirmed(user) -> bool:
    """Whether the login page would let `user` in as far as e-mail goes (ACCOUNT_EMAIL_VERIFICATION)."""
    mandatory = app_settings.EMAIL_VERIFICATION == app_settings.EmailVerificationMethod.MANDATORY
    return not mandatory or has_verified_email(user)


def check_two_factor(request, user, otp: str | None) -> None:
    """With two-factor on, the code from the authenticator app (or a recovery code) is needed too."""
    if not is_mfa_enabled(user):
        return
    if not otp:
        raise SignInRefused(
            _(
                "This account uses two-factor authentication: send the 6-digit code from your authenticator app "
                "(or a recovery code) as `otp`."
            ),
            code="two_factor_required",
        )
    form = AuthenticateForm(user=user, data={"code": otp})
    if form.is_valid():
        form.authenticator.record_usage()  # not form.save(): that records a sign-in in a session cookie
        return
    if locked_out(form):
        raise Throttled(
            wait=two_factor_retry_after(request._request, user),
            detail=_("Too many wrong two-factor codes for this account; try again in a few minutes."),
        )
    raise SignInRefused(_("The two-factor code is wrong, or was already used."), code="two_factor_invalid")
