from csp.constants import UNSAFE_INLINE
from csp.decorators import csp_update
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from base.api.errors import unknown_endpoint
from billing.api import TopupCreateView
from portal.api import views

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("pools", views.PoolViewSet, basename="pool")
router.register("ledger", views.LedgerViewSet, basename="ledger")
router.register("tokens", views.TokenViewSet, basename="token")

urlpatterns = [
    path("chips/", views.ChipListView.as_view(), name="api-chips"),
    path("account/", views.AccountView.as_view(), name="api-account"),
    path("topups/", TopupCreateView.as_view(), name="api-topups"),
    path(
        "schema/",
        SpectacularAPIView.as_view(
            authentication_classes=[],
            permission_classes=[],
            custom_settings={"PREPROCESSING_HOOKS": ["base.api.schema.without_agent_endpoints"]},
        ),
        name="api-schema",
    ),
    path(
        "docs/",
        # The split view serves Swagger UI's start-up script as a file: the page runs no inline script.
        csp_update({"style-src": [UNSAFE_INLINE]})(  # Swagger UI styles itself with <style> elements
            SpectacularSwaggerSplitView.as_view(
                url_name="api-schema",
                template_name="portal/api_docs.html",  # Swagger UI under a bar of links back to the site
                authentication_classes=[],
                permission_classes=[],
            )
        ),
        name="api-docs",
    ),
    *router.urls,
    path("", include("workers.api.urls")),
    path("", include("market.urls")),
    path("", include("portal.api.usage")),
    # Last: any other /api/v1/ path answers JSON in the API's error format, not Django's HTML page.
    re_path(r"^.*$", unknown_endpoint),
]
