"""Staff sign in like everyone else (lockout, two-factor), and may be required to use two-factor.

Django's admin has a login form of its own, with no lockout: twelve wrong operator passwords then
the right one got in. `secure_admin_login` sends /admin/login/ to allauth's login page instead, so
staff go through the same per-account lockout and, once they have an authenticator app, its codes.
When the operator setting `staff_two_factor_required` is on, a signed-in staff member without an
authenticator is sent to set one up before any admin page opens.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlencode

from allauth.account.decorators import secure_admin_login
from allauth.mfa.models import Authenticator
from allauth.mfa.utils import is_mfa_enabled
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.translation import gettext as _

from billing.models import OperatorSettings

ADMIN_PREFIX = "/admin/"


def route_admin_login_through_allauth() -> None:
    """/admin/login/ redirects to the site's login page (with ?next=), or 403s a signed-in non-staff user."""
    site = admin.site
    if not getattr(site.login, "through_allauth", False):
        site.login = secure_admin_login(site.login)
        site.login.through_allauth = True


def needs_two_factor_setup(user) -> bool:
    """Staff without an authenticator app, while the operator requires one."""
    if not (user.is_authenticated and user.is_staff):
        return False
    if not OperatorSettings.load().staff_two_factor_required:
        return False
    return not is_mfa_enabled(user, [Authenticator.Type.TOTP])


class StaffTwoFactorMiddleware:
    """Admin pages answer staff who must, but don't yet, use two-factor with a redirect to set it up."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith(ADMIN_PREFIX) and needs_two_factor_setup(request.user):
            messages.warning(
                request, _("Staff must use two-factor sign-in: add an authenticator app to open the admin.")
            )
            setup = reverse("mfa_activate_totp") + "?" + urlencode({"next": request.get_full_path()})
            return HttpResponseRedirect(setup)
        return self.get_response(request)
