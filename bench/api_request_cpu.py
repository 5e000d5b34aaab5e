"""CPU per API request inside one web process, each optimisation of issue #15 switched off in turn.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/x [REDIS_URL=redis://127.0.0.1:6379/9] \\
        .venv/bin/python bench/api_request_cpu.py [--rounds 8] [--requests 100]

bench/api_load.py measures what `make run` serves, but its figures move with the shared machine's
speed from one run to the next (±15%). This one answers "what did each change buy" with ratios
measured side by side: in one process it calls Django's WSGI handler directly (no HTTP server, no
locust) with the same five reads as the load benchmark (account, jobs, chips, ledger, bids, a bearer
token each, rotating over the seeded users), and alternates configurations round by round:
everything as shipped, everything as before, and each change alone reverted:

- `redis client`: Django's own RedisCacheClient.get_client, which makes a new redis.Redis per command;
- `throttle`: DRF's SimpleRateThrottle counting (a GET and a SET of the caller's pickled history);
- `fields`: serializers building their fields from the model per request (DRF's ModelSerializer);
- `prepared queries`: the list pages' and the balance's queries built and compiled by the ORM on every
  request instead of once per thread (base/prepared.py);
- `policy on json`: django-csp building a Content-Security-Policy for JSON answers too.

It prints the median CPU milliseconds per request of each configuration and its ratio to the shipped
one. The database is a throwaway one (`bench_api_request_cpu` on DATABASE_URL's server, dropped after);
the cache keys go under a prefix of this run in REDIS_URL's Redis (default redis://127.0.0.1:6379/9).
"""

from __future__ import annotations

import argparse
import io
import os
import secrets
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from machine_speed import loop_ms  # noqa: E402 - bench/ is on the path when run
from throwaway_db import database_url, recreate_database  # noqa: E402

DATABASE = "bench_api_request_cpu"
PATHS = ["/api/v1/account/", "/api/v1/jobs/", "/api/v1/chips/", "/api/v1/ledger/", "/api/v1/bids/"]


def switches() -> dict[str, tuple]:
    """name -> (revert, restore): each change of #15 and how to put the code it replaced back."""
    from csp.middleware import CSPMiddleware
    from django.core.cache.backends.redis import RedisCacheClient
    from rest_framework.serializers import ModelSerializer
    from rest_framework.throttling import SimpleRateThrottle

    from base.api.serializers import FieldsBuiltOnce
    from base.prepared import PreparedQuery
    from portal.api.throttling import SlidingWindowThrottle
    from portal.cache import FailOpenRedisCacheClient
    from portal.middleware import ContentSecurityPolicy

    shipped_client = FailOpenRedisCacheClient.get_client
    shipped_allow = SlidingWindowThrottle.allow_request
    shipped_fields = FieldsBuiltOnce.get_fields
    shipped_rows = PreparedQuery.rows
    shipped_policy = ContentSecurityPolicy.process_response

    def rows_through_the_orm(self, *, limit=None, offset=0, **values):
        queryset = self.build(**values)  # built and compiled on every call, as before
        return list(queryset[offset : offset + limit] if limit is not None else queryset)

    return {
        "redis client": (
            lambda: setattr(FailOpenRedisCacheClient, "get_client", RedisCacheClient.get_client),
            lambda: setattr(FailOpenRedisCacheClient, "get_client", shipped_client),
        ),
        "throttle": (
            lambda: setattr(SlidingWindowThrottle, "allow_request", SimpleRateThrottle.allow_request),
            lambda: setattr(SlidingWindowThrottle, "allow_request", shipped_allow),
        ),
        "fields": (
            lambda: setattr(FieldsBuiltOnce, "get_fields", ModelSerializer.get_fields),
            lambda: setattr(FieldsBuiltOnce, "get_fields", shipped_fields),
        ),
        "prepared queries": (
            lambda: setattr(PreparedQuery, "rows", rows_through_the_orm),
            lambda: setattr(PreparedQuery, "rows", shipped_rows),
        ),
        "policy on json": (
            lambda: setattr(ContentSecurityPolicy, "process_response", CSPMiddleware.process_response),
            lambda: setattr(ContentSecurityPolicy, "process_response", shipped_policy),
        ),
    }


def caller(tokens: list[str]):
    from django.core.handlers.wsgi import WSGIHandler

    app = WSGIHandler()

    def call(path: str, token: str) -> None:
        environ = {
            "REQUEST_METHOD": "GET",
            "PATH_INFO": path,
            "QUERY_STRING": "",
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1",
            "HTTP_AUTHORIZATION": f"Bearer {token}",
            "HTTP_ACCEPT": "application/json",
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(b""),
            "wsgi.errors": sys.stderr,
        }
        status = []
        b"".join(app(environ, lambda code, headers, exc_info=None: status.append(code)))
        if not status[0].startswith("200"):
            raise RuntimeError(f"{path}: {status[0]}")

    return call


def measure(call, tokens: list[str], configurations: dict, rounds: int, requests: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in configurations}
    for round_ in range(rounds):
        for name, apply in configurations.items():
            apply()
            for i in range(10):  # settle caches of this configuration
                call(PATHS[i % len(PATHS)], tokens[i % len(tokens)])
            started = time.process_time()
            for i in range(requests):
                call(PATHS[i % len(PATHS)], tokens[(i + round_) % len(tokens)])
            samples[name].append((time.process_time() - started) / requests * 1000)
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8, help="rounds; each measures every configuration once")
    parser.add_argument("--requests", type=int, default=100, help="requests per configuration per round")
    parser.add_argument("--users", type=int, default=50, help="seeded users, each with a token")
    args = parser.parse_args(argv)
    url = os.environ.get("DATABASE_URL")
    if not url:
        parser.error("set DATABASE_URL to a PostgreSQL server: a throwaway database is made (and dropped) there")
    os.environ.update(
        DATABASE_URL=database_url(url, DATABASE),
        REDIS_URL=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/9"),
        CACHE_KEY_PREFIX=f"apicpu-{secrets.token_hex(4)}",
        DJANGO_SETTINGS_MODULE="portal.settings",
        API_CHIPS_CACHE_SECONDS="1",
        LOG_LEVEL="WARNING",  # the request line is the same in every configuration
    )
    os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(40))
    recreate_database(url, DATABASE)
    try:
        import django

        django.setup()
        from django.core.cache import cache
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        call_command("seed_catalog", verbosity=0)
        from api_load import seed

        tokens = seed(args.users, 5, 8, 3)
        call = caller(tokens)
        toggles = switches()

        def everything(shipped: bool, but: str | None = None):
            def apply() -> None:
                for name, (revert, restore) in toggles.items():
                    (restore if shipped and name != but else revert)()

            return apply

        configurations = {"as shipped": everything(True), "all reverted": everything(False)}
        configurations |= {f"{name} reverted": everything(True, but=name) for name in toggles}
        for i in range(100):  # warm up: imports, connections, the chip list
            call(PATHS[i % len(PATHS)], tokens[i % len(tokens)])
        samples = measure(call, tokens, configurations, args.rounds, args.requests)
        client = cache._cache.get_client(write=True)
        for key in client.scan_iter(match=f"{os.environ['CACHE_KEY_PREFIX']}:*"):
            client.delete(key)
        from django.db import connections

        connections.close_all()
    finally:
        recreate_database(url, DATABASE, drop_only=True)
    shipped = statistics.median(samples["as shipped"])
    print(
        f"\nCPU per API request in one process ({args.rounds} rounds x {args.requests} requests per configuration, "
        f"interleaved; machine speed: a fixed loop takes {loop_ms():.0f} ms; load {os.getloadavg()[0]:.2f})"
    )
    print(f"{'configuration':<26} {'median ms':>9} {'min':>6} {'max':>6} {'vs shipped':>10}")
    for name, values in samples.items():
        median = statistics.median(values)
        print(f"{name:<26} {median:>9.2f} {min(values):>6.2f} {max(values):>6.2f} {median / shipped:>9.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
