"""Sign-in lockout per account and address, answered as a 429 with Retry-After on the page and the API.

allauth counts failed logins per "key" (ACCOUNT_RATE_LIMITS["login_failed"]). Its key is the login
alone, and its default adds a per-IP limit, so ten failures from one office's address locked every
other user there out. Here the key is the login *and* the client's address: guessing at one account
from one address locks exactly that pair, and the same account from elsewhere, or other accounts
from the same address, still sign in. Staff sign in through the same page (see portal.staff).

The adapter also names the site in allauth's mails: without django.contrib.sites allauth names it after
the request's host, so sign-up mail came as "[127.0.0.1:8000] Please Confirm Your Email Address".
"""

from __future__ import annotations

import math
import time
from types import SimpleNamespace
from typing import Any

from allauth.account.adapter import DefaultAccountAdapter, get_adapter
from allauth.account.views import LoginView as AllauthLoginView
from allauth.core.internal import ratelimit
from django.contrib.sites.shortcuts import get_current_site
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse

APP = "allauth.account"
LOCKOUT_CODE = "too_many_login_attempts"
SITE_NAME = "Starverse"


class AccountAdapter(DefaultAccountAdapter):
    """allauth's adapter, with failed logins counted per (login, client address)."""

    def _get_login_attempts_cache_key(self, request: HttpRequest, **credentials: Any) -> str:
        # allauth's own hook for the "login_failed" key (used on every attempt and by password reset).
        login = super()._get_login_attempts_cache_key(request, **credentials)
        return f"{login}:{ratelimit.get_ip(request)}"

    def format_email_subject(self, subject: str) -> str:
        return f"[{SITE_NAME}] {subject}"

    def send_mail(self, template_prefix: str, email: str, context: dict) -> None:
        # allauth's mail templates say {{ current_site.name }}; the domain stays the one the user visited.
        site = SimpleNamespace(name=SITE_NAME, domain=get_current_site(self.request).domain)
        super().send_mail(template_prefix, email, {"current_site": site, **context})


def lockout_retry_after(request: HttpRequest, login: str) -> int:
    """Seconds until `login` may try again from this request's address (at least 1 while locked)."""
    return retry_after(request, get_adapter(request)._get_login_attempts_cache_key(request, username=login))


def two_factor_retry_after(request: HttpRequest, user) -> int:
    """Seconds until `user` may try a two-factor code again (allauth.mfa counts failures per account)."""
    return retry_after(request, f"mfa-auth-user-{user.pk}")  # allauth.mfa.base.internal.flows.check_rate_limit


def retry_after(request: HttpRequest, key: str) -> int:
    """Seconds until allauth's "login_failed" limit for `key` lets an attempt through (at least 1)."""
    now, wait = time.time(), 0.0
    for rate in ratelimit.get_rates(app=APP, action="login_failed"):
        if rate.per != "key":
            continue
        history = cache.get(ratelimit.get_cache_key(request, app=APP, action="login_failed", rate=rate, key=key), [])
        if len(history) >= rate.amount:  # newest first: the lock lifts when the oldest attempt counted expires
            wait = max(wait, history[-1] + rate.duration - now)
    return max(1, math.ceil(wait))


def locked_out(form) -> bool:
    return any(error.code == LOCKOUT_CODE for errors in form.errors.as_data().values() for error in errors)


class LoginView(AllauthLoginView):
    """allauth's login page; a locked-out attempt answers 429 with Retry-After instead of 200."""

    def form_invalid(self, form) -> HttpResponse:
        response = super().form_invalid(form)
        if locked_out(form):
            response.status_code = 429
            login = form.cleaned_data.get("login") or form.data.get("login", "")
            response["Retry-After"] = str(lockout_retry_after(self.request, login))
        return response
