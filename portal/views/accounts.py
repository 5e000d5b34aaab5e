"""Sign-up pages around allauth's: confirming signs you in, and the "verify your e-mail" page can resend (#28)."""

from __future__ import annotations

from allauth.account import app_settings
from allauth.account.internal.flows.email_verification import send_verification_email_at_login
from allauth.account.models import Login
from allauth.account.stages import EmailVerificationStage, LoginStageController
from allauth.account.utils import has_verified_email, perform_login
from allauth.account.views import ConfirmEmailView as AllauthConfirmEmailView
from allauth.account.views import EmailVerificationSentView as AllauthVerificationSentView
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.translation import gettext as _

from billing.models import OperatorSettings
from kernel.money import format_money


class ConfirmEmailView(AllauthConfirmEmailView):
    """allauth's confirmation link; confirming an account's first address signs it in, in any browser.

    allauth signs in only the browser that signed up (the pending sign-in lives in its session), so a link
    opened from a mail app or on another device left people at the login page. The link still can't serve
    as a standing login: it confirms once (its key names an unconfirmed address), it signs in only an
    account that had no confirmed address (adding a second address signs nobody in), and the sign-in runs
    allauth's stages, so two-factor still asks for its code.
    """

    def post(self, *args, **kwargs) -> HttpResponse:
        user = self.get_object().email_address.user  # a bad key is allauth's 404, before anything changes
        first = not has_verified_email(user)
        response = super().post(*args, **kwargs)
        if first and self.request.user.is_anonymous and has_verified_email(user):
            return perform_login(self.request, user, email_verification=app_settings.EMAIL_VERIFICATION)
        return response


def pending_sign_up(request: HttpRequest) -> Login | None:
    """The sign-up (or sign-in) of this browser that waits for its address to be confirmed, if any."""
    stage = LoginStageController.enter(request, EmailVerificationStage.key)
    return stage.login if stage else None


class VerificationSentView(AllauthVerificationSentView):
    """allauth's "verify your e-mail" page, saying that the trial credit waits there, with a button to resend."""

    template_name = "account/verification_sent.html"

    def get_context_data(self, **kwargs) -> dict:
        credit = OperatorSettings.load().trial_credit
        return {
            **super().get_context_data(**kwargs),
            "trial_credit": format_money(credit) if credit > 0 else "",
            "can_resend": pending_sign_up(self.request) is not None,
        }

    def post(self, request: HttpRequest) -> HttpResponse:
        """Send the link again through allauth (which also answers a taken address the same way as a new one)."""
        login = pending_sign_up(request)
        if login is None:
            messages.info(request, _("Sign in with your username and password: we send a new link then."))
            return redirect("account_login")
        if not send_verification_email_at_login(request, login):
            # allauth's cooldown per address (ACCOUNT_EMAIL_CONFIRMATION_COOLDOWN, 3 minutes).
            messages.warning(
                request,
                _(
                    "A link went to your address a moment ago: look in your inbox and spam folder, "
                    "or ask again in a few minutes."
                ),
            )
        return redirect("account_email_verification_sent")
