"""PostgreSQL with a health check that a busy connection skips, and django-prometheus's query metrics.

With CONN_HEALTH_CHECKS Django asks a persistent connection `SELECT 1` before each request's first query, so
that one PostgreSQL has dropped (a restart) is replaced instead of failing the request. On a busy web thread
that is one more round trip on every request: 0.7 ms of the gateway's ~4 ms on the 2-core machine
(docs/SERVING.md). As HikariCP does (its aliveBypassWindowMs), a connection that served a request or task
without an error within the last ALIVE_BYPASS_S is trusted without asking. The price: a connection used in
the half second before PostgreSQL went away fails its next request once (a 503, portal/outage.py), and is
then closed and replaced like any broken one.

The query metrics are django-prometheus's engine's, unless settings.PROMETHEUS_DB_METRICS is off.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.db.backends.postgresql import base as postgresql

if settings.PROMETHEUS_DB_METRICS:
    from django_prometheus.db.backends.postgresql import base as engine
else:
    engine = postgresql

ALIVE_BYPASS_S = 0.5


class DatabaseWrapper(engine.DatabaseWrapper):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.answered_at = float("-inf")  # when this connection last served a request or task without an error

    def close_if_health_check_failed(self) -> None:
        if (
            self.connection is not None
            and not self.health_check_done
            and time.monotonic() - self.answered_at < ALIVE_BYPASS_S
        ):
            self.health_check_done = True
            return
        super().close_if_health_check_failed()

    def close_if_unusable_or_obsolete(self) -> None:
        """Django's, at the start and end of each request and task; a connection that served it (a cursor was
        made: the health check is done) without an error is noted as answering."""
        answered = self.connection is not None and self.health_check_done and not self.errors_occurred
        super().close_if_unusable_or_obsolete()
        if answered and self.connection is not None:
            self.answered_at = time.monotonic()
