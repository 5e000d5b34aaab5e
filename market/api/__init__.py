"""The market's part of the v1 API: bids (`bids.py`), spot price history (`prices.py`) and bid advice
(`advice.py`), their serializers in `serializers.py`; market/urls.py routes them."""
