"""The site's PostgreSQL engine (settings.DATABASES's ENGINE "portal.database"): see base.py."""
