from django.urls import path
from rest_framework.routers import DefaultRouter

from market import api

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("bids", api.BidViewSet, basename="bid")

urlpatterns = [
    path("prices/history/", api.PriceHistoryView.as_view(), name="api-price-history"),
    path("market/advice/", api.MarketAdviceView.as_view(), name="api-market-advice"),
    *router.urls,
]
