"""The web pages: public pages (pages.py) and the signed-in dashboard (dashboard.py)."""
