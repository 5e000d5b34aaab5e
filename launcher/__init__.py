"""Local mode: embedded PostgreSQL/Redis and the `python -m launcher` launcher behind `make run`.

Nothing in this package imports Django, so it can start the stores before settings are loaded
(the launcher and the pytest plugin both need the database URL before Django starts).
"""
