from django.contrib import admin
from django.urls import include, path, re_path
from django.views.i18n import JavaScriptCatalog

from billing.webhooks import stripe_webhook
from portal.accounts import LoginView
from portal.health import ReadinessView, healthz
from portal.locale import switch_language
from portal.metrics import metrics
from portal.staff import route_admin_login_through_allauth
from portal.views.accounts import ConfirmEmailView, VerificationSentView

route_admin_login_through_allauth()  # the admin's own login form has no lockout and no two-factor
handler404 = "base.api.errors.page_not_found"  # JSON under /api/
handler500 = "portal.outage.server_error"  # a database or Redis outage met in a middleware: a 503, not a 500

urlpatterns = [
    # Operations (docs/OPERATIONS.md): liveness, readiness, Prometheus.
    path("healthz", healthz, name="healthz"),
    path("readyz", ReadinessView.as_view(), name="readyz"),
    path("metrics", metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("stripe/webhook/", stripe_webhook, name="stripe_webhook"),
    # The header's language switch (Django's set_language, remembered on a signed-in account) and the
    # page scripts' strings in the active language (`gettext()` in static/js/).
    path("i18n/setlang/", switch_language, name="set_language"),
    path("i18n/catalog.js", JavaScriptCatalog.as_view(), name="javascript-catalog"),
    # allauth's login page, answering a locked-out attempt with 429 and Retry-After.
    path("accounts/login/", LoginView.as_view()),
    # allauth's sign-up pages: the "verify your e-mail" page resends, and confirming signs you in (#28).
    path("accounts/confirm-email/", VerificationSentView.as_view()),
    re_path(r"^accounts/confirm-email/(?P<key>[-:\w]+)/$", ConfirmEmailView.as_view()),
    path("accounts/", include("allauth.urls")),
    path("api/v1/", include("portal.api.urls")),
    # OpenAI's fine-tuning API for the official `openai` client (docs/FINE_TUNING.md).
    path("v1/", include("openai_api.urls")),
    path("", include("portal.views.urls")),
]
