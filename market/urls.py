from django.urls import path
from rest_framework.routers import DefaultRouter

from market.api.advice import MarketAdviceView
from market.api.bids import BidViewSet
from market.api.prices import PriceHistoryView

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("bids", BidViewSet, basename="bid")

urlpatterns = [
    path("prices/history/", PriceHistoryView.as_view(), name="api-price-history"),
    path("market/advice/", MarketAdviceView.as_view(), name="api-market-advice"),
    *router.urls,
]
