from django.urls import path

from portal.views import dashboard, pages

urlpatterns = [
    path("", pages.home, name="home"),
    path("pricing/", pages.pricing, name="pricing"),
    path("dashboard/", dashboard.dashboard, name="dashboard"),
    path("dashboard/tokens/", dashboard.tokens, name="tokens"),
    path("dashboard/tokens/<int:pk>/revoke/", dashboard.revoke_token, name="token_revoke"),
]
