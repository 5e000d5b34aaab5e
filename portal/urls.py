from django.contrib import admin
from django.urls import include, path

from billing.webhooks import stripe_webhook

urlpatterns = [
    path("admin/", admin.site.urls),
    path("stripe/webhook/", stripe_webhook, name="stripe_webhook"),
    path("accounts/", include("allauth.urls")),
    path("api/v1/", include("portal.api.urls")),
    path("", include("portal.views.urls")),
]
