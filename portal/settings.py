"""Starverse settings: one env-driven module for local mode, tests and production."""

from __future__ import annotations

from pathlib import Path

import dj_database_url

from portal.api_schema import SPECTACULAR_SETTINGS  # noqa: F401 - a setting, defined beside its hooks
from portal.beat_schedule import CELERY_BEAT_SCHEDULE  # noqa: F401 - a setting: the periodic tasks
from portal.content_policy import CONTENT_SECURITY_POLICY as PAGE_CONTENT_POLICY
from portal.env import env, env_bool, env_int, env_list, env_secret, find_program, secret_key
from portal.logs import log_format, logging_config
from portal.mail_settings import mail_settings
from portal.metrics_access import parse_networks
from portal.sentry import init_sentry

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(env("STARVERSE_DATA_DIR", str(BASE_DIR / ".data")))

DEBUG = env_bool("DEBUG", False)
# Production sets DJANGO_SECRET_KEY (or DJANGO_SECRET_KEY_FILE); `make run` generates a key into the
# data folder. Without either, settings refuse to load (ImproperlyConfigured says what to set).
SECRET_KEY = secret_key(DATA_DIR)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")
SITE_URL = env("SITE_URL", "http://127.0.0.1:" + env("PORT", "8000"))

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.humanize",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "allauth",
    "allauth.account",
    "allauth.mfa",
    "csp",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "base",
    "portal",
    "billing",
    "fleet",
    "workers",
    "market",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "portal.middleware.RefuseNulCharacters",  # after the language is known: its 400 is in it
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "portal.locale.UserLocaleMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "portal.middleware.ContentSecurityPolicy",
    "allauth.account.middleware.AccountMiddleware",
    "portal.staff.StaffTwoFactorMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "portal.outage.ServiceUnavailableMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "portal.context_processors.platform",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env("DATABASE_URL", "postgres://postgres@127.0.0.1:54329/starverse"),
        conn_max_age=env_int("DB_CONN_MAX_AGE", 60),
        conn_health_checks=True,
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env("REDIS_URL", "redis://127.0.0.1:63799/0")
# A paused Redis accepts connections and never answers: every Redis client here waits at most this
# long per command (the cache, Celery publishing, agent wake-ups), and the cache fails open.
REDIS_SOCKET_TIMEOUT_S = float(env("REDIS_SOCKET_TIMEOUT_S", "1"))
CACHES = {
    "default": {
        "BACKEND": "portal.cache.FailOpenRedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": env("CACHE_KEY_PREFIX", "starverse"),
        "OPTIONS": {"socket_connect_timeout": REDIS_SOCKET_TIMEOUT_S, "socket_timeout": REDIS_SOCKET_TIMEOUT_S},
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# The test suite's processes, and only they (tests/support/plugins/test_env.py sets this), hash passwords with
# MD5, as Django's testing docs advise: PBKDF2's million rounds take ~0.3 s a password on a 2-core machine, and
# the suite makes thousands. Never set it on a real platform.
if env_bool("TESTS_HASH_PASSWORDS_FAST"):
    PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]

# allauth: username or e-mail login, unique e-mail, verified before the first login (console mail
# locally). Mandatory verification is what lets sign-up hide whether an e-mail is registered: a
# taken address gets the same "check your mail" answer (and its owner a mail), not an error.
ACCOUNT_ADAPTER = "portal.accounts.AccountAdapter"
ACCOUNT_LOGIN_METHODS = {"username", "email"}
ACCOUNT_SIGNUP_FIELDS = ["email*", "username*", "password1*", "password2*"]
ACCOUNT_UNIQUE_EMAIL = True
ACCOUNT_EMAIL_VERIFICATION = env("ACCOUNT_EMAIL_VERIFICATION", "mandatory")
ACCOUNT_PREVENT_ENUMERATION = True
ACCOUNT_LOGIN_ON_EMAIL_CONFIRMATION = True
ACCOUNT_LOGOUT_ON_GET = False
# Five failed logins per (login, client address) in 5 minutes lock that pair (portal.accounts); no
# per-address limit, which locked every user behind one address out. A lock answers 429 + Retry-After.
ACCOUNT_RATE_LIMITS = {"login_failed": "5/5m/key"}
# Behind a proxy the client's address is the last X-Forwarded-For hop it added.
ALLAUTH_TRUSTED_PROXY_COUNT = 1 if env_bool("BEHIND_PROXY") else 0
# Two-factor sign-in with an authenticator app (TOTP) and recovery codes; operators can require it
# for staff (billing.OperatorSettings.staff_two_factor_required, enforced by portal.staff).
MFA_SUPPORTED_TYPES = ["totp", "recovery_codes"]
MFA_TOTP_ISSUER = "Starverse"
LOGIN_REDIRECT_URL = "dashboard"
ACCOUNT_LOGOUT_REDIRECT_URL = "home"
LOGIN_URL = "account_login"

# Mail (sign-up needs it in production): EMAIL_URL or EMAIL_*, in the Operations block at the end.

# Two languages (docs/I18N.md): a signed-in person's saved choice, then the header's switch (a cookie), then
# Accept-Language, then English. Our catalogs live in locale/; Django, its admin, allauth and DRF bring theirs.
LANGUAGE_CODE = "en"
LANGUAGES = [("zh-hans", "简体中文"), ("en", "English")]
LOCALE_PATHS = [BASE_DIR / "locale"]
USE_I18N = True
# The server, the database and the API keep UTC; pages show a person's own zone, this one by default.
TIME_ZONE = env("TIME_ZONE", "UTC")
DISPLAY_TIME_ZONE = env("DISPLAY_TIME_ZONE", "Asia/Shanghai")
USE_TZ = True
# Each language's date formats (portal/formats/<lang>/formats.py); `{{ when|when }}` adds the zone.
FORMAT_MODULE_PATH = ["portal.formats"]

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
if env_bool("STATIC_NO_MANIFEST", False):
    STORAGES["staticfiles"] = {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}
MEDIA_ROOT = DATA_DIR / "media"
# Uploaded datasets are their owner's: private files in private folders.
FILE_UPLOAD_PERMISSIONS = 0o600
FILE_UPLOAD_DIRECTORY_PERMISSIONS = 0o700
# An uploaded file larger than this is streamed to a temporary file instead of memory (models are
# gigabytes). Form fields stay bounded by DATA_UPLOAD_MAX_MEMORY_SIZE, Django's default.
FILE_UPLOAD_MAX_MEMORY_SIZE = env_int("FILE_UPLOAD_MAX_MEMORY_SIZE", 2_621_440)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["portal.api.authentication.BearerTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "portal.api.permissions.TokenScopeAllows",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # JSON and forms without NUL characters or deep nesting: refused by field with a 400.
    "DEFAULT_PARSER_CLASSES": [
        "base.api.parsers.StrictJSONParser",
        "base.api.parsers.StrictFormParser",
        "base.api.parsers.StrictMultiPartParser",
    ],
    # ?page= and ?page_size= (1-200, else a 400); `count` exact up to 10,000 and counted only when a page has
    # more after it (portal/api/pagination.py, docs/API.md "Pagination").
    "DEFAULT_PAGINATION_CLASS": "portal.api.pagination.BoundedPageNumberPagination",
    "PAGE_SIZE": 50,
    # Generous per-user and per-IP limits (429 with Retry-After past them); agent endpoints are not throttled.
    "DEFAULT_THROTTLE_CLASSES": ["portal.api.throttling.UserThrottle", "portal.api.throttling.AnonThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        "user": env("THROTTLE_USER", "1200/min"),
        "anon": env("THROTTLE_ANON", "300/min"),
        "token_create": env("THROTTLE_TOKEN_CREATE", "20/min"),
    },
    # Who an anonymous caller is, for the per-address throttles: the connecting address, or the one our
    # own proxy put in X-Forwarded-For (BEHIND_PROXY); never whatever a client writes in that header.
    "NUM_PROXIES": 1 if env_bool("BEHIND_PROXY") else 0,
    "EXCEPTION_HANDLER": "base.api.errors.exception_handler",
}
# The API's chip list kept this many seconds per web process (0: computed on every request; docs/API.md).
API_CHIPS_CACHE_SECONDS = float(env("API_CHIPS_CACHE_SECONDS", "1"))

CELERY_BROKER_URL = env("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = None
CELERY_TASK_DEFAULT_QUEUE = env("CELERY_QUEUE", "celery")
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": 3600,
    # Publishing waits at most these (the worker's BRPOP runs in its event loop, not under them).
    "socket_timeout": REDIS_SOCKET_TIMEOUT_S,
    "socket_connect_timeout": REDIS_SOCKET_TIMEOUT_S,
}
# One quick retry (a restarted Redis leaves a stale pooled connection), then the publish gives up.
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}
CELERY_TASK_TIME_LIMIT = 600
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
# Planning (which users can flood with queued jobs) goes to "<CELERY_QUEUE>.planning", served by a
# worker of its own, so the meter, the reconciler, spot clearing and audits never wait behind it.
CELERY_TASK_ROUTES = ("portal.task_routes.route_task",)
# CELERY_BEAT_SCHEDULE (the meter, the reconciler, spot clearing, audits, pruning): portal/beat_schedule.py.
# Compute fleet and training.
# An agent polls at least every AGENT_POLL_WAIT_S; one silent for the deadline is declared lost by the
# reconciler (every RECONCILE_SECONDS), so a dead node is noticed within deadline + one pass (<= 10 s).
AGENT_POLL_WAIT_S = env_int("AGENT_POLL_WAIT_S", 3)
AGENT_HEARTBEAT_DEADLINE_S = env_int("AGENT_HEARTBEAT_DEADLINE_S", 8)
# The async agent service (portal/asgi.py, docs/OPERATIONS.md "Agent service"). It trusts a node token it
# checked for AGENT_AUTH_CACHE_S: a re-enrollment or an operator's reset refuses the old token there within
# that long. Heartbeats are written in one UPDATE per AGENT_HEARTBEAT_FLUSH_S (keep the deadline above
# 2 x AGENT_POLL_WAIT_S + this). Its polls' ORM work runs on AGENT_SERVICE_DB_THREADS threads (a connection
# each), reports' and enrollments' on 2 more, per process.
AGENT_AUTH_CACHE_S = float(env("AGENT_AUTH_CACHE_S", "5"))
AGENT_HEARTBEAT_FLUSH_S = float(env("AGENT_HEARTBEAT_FLUSH_S", "1"))
AGENT_SERVICE_DB_THREADS = env_int("AGENT_SERVICE_DB_THREADS", 6)
JOB_STOP_GRACE_S = env_int("JOB_STOP_GRACE_S", 30)
# Ranks rendezvous on a port derived from (job, epoch) above this base; two platforms on one host
# (parallel test runs) pick different bases.
RENDEZVOUS_PORT_BASE = env_int("RENDEZVOUS_PORT_BASE", 29500)
# ...within this many ports. The default range, 29500-32499, stays below Linux's ephemeral ports (32768-60999),
# which any program binding port 0 or connecting out may hold at any moment: a rendezvous port drawn there
# can be taken, and rank 0 then fails with EADDRINUSE.
RENDEZVOUS_PORT_SPAN = env_int("RENDEZVOUS_PORT_SPAN", 3000)
# Islands (docs/ISLANDS.md): the torchft Lighthouse program the platform runs per job of islands (run_lighthouses),
# ports from LIGHTHOUSE_PORT_BASE, reached at LIGHTHOUSE_HOST (blank: the platform's host); no program: no islands.
LIGHTHOUSE_PROGRAM = env("LIGHTHOUSE_PROGRAM", find_program("torchft_lighthouse"))
LIGHTHOUSE_PORT_BASE, LIGHTHOUSE_HOST = env_int("LIGHTHOUSE_PORT_BASE", 28500), env("LIGHTHOUSE_HOST", "")
TRUSTED_PROXIES = env_list("TRUSTED_PROXIES")  # proxies (IPs/CIDRs) whose X-Forwarded-For names an agent's address
JOB_PROVISIONING_TIMEOUT_S = env_int("JOB_PROVISIONING_TIMEOUT_S", 180)
RUNS_ROOT = Path(env("RUNS_ROOT", str(DATA_DIR / "runs")))
# Object storage for datasets, models, checkpoints and artifacts (kernel/storage): a directory by
# default, or s3://bucket/prefix with the standard AWS_ENDPOINT_URL / AWS_ACCESS_KEY_ID /
# AWS_SECRET_ACCESS_KEY / AWS_REGION. Only the platform holds these: compute hosts get grants, URLs for
# one placement's objects signed on request (workers/services/storage_grants.py), each valid this long.
STORAGE_URL = env("STORAGE_URL", f"file://{DATA_DIR / 'storage'}")
STORAGE_GRANT_URL_TTL_S = env_int("STORAGE_GRANT_URL_TTL_S", 900)
STAGING_CACHE_DIR = Path(env("STAGING_CACHE_DIR", str(DATA_DIR / "cache")))
STAGING_CACHE_BYTES = int(env("STAGING_CACHE_BYTES", str(20 << 30)))
CHECKPOINT_KEEP = int(env("CHECKPOINT_KEEP", "3"))  # periodic checkpoints kept per job (plus notice/stop ones)
DATASET_MAX_BYTES = env_int("DATASET_MAX_BYTES", 50 * 1024 * 1024)
# Users' own models: the archive's bytes and its bytes once unpacked are each bounded by MODEL_MAX_BYTES
# (counted while streaming and unpacking), its files by MODEL_MAX_FILES.
MODEL_MAX_BYTES = env_int("MODEL_MAX_BYTES", 20 * 1024**3)
MODEL_MAX_FILES = env_int("MODEL_MAX_FILES", 10_000)
# Each user's datasets and models together may hold this many bytes (their jobs' checkpoints are shown, not
# counted); an upload past it is refused naming the quota and what is used (workers/services/storage_quota.py).
STORAGE_QUOTA_BYTES = env_int("STORAGE_QUOTA_BYTES", 50 * 1024**3)
JOB_MAX_STEPS = env_int("JOB_MAX_STEPS", 1_000_000)
JOB_MAX_BATCH = env_int("JOB_MAX_BATCH", 1024)
# The OpenAI fine-tuning API (/v1/, docs/FINE_TUNING.md) has no budget field: its jobs get this hourly cap, in
# currency units (the SDK's default budget).
OPENAI_API_MAX_BUDGET = env("OPENAI_API_MAX_BUDGET", "28")
# Deployments (docs/SERVING.md): the shortest idle timeout a deployment may have before it scales to zero.
SERVING_MIN_IDLE_TIMEOUT_S = env_int("SERVING_MIN_IDLE_TIMEOUT_S", 30)
# The serving gateway (/v1/chat/completions, docs/SERVING.md): a request to a deployment with no ready replica
# waits this many seconds for one to start, then is answered 503 with Retry-After.
SERVING_COLD_START_TIMEOUT_S = float(env("SERVING_COLD_START_TIMEOUT_S", "120"))
# Jobs one user may have waiting to be placed; a queued job is re-planned with backoff (doubling
# from PLAN_BACKOFF_MIN_S up to PLAN_BACKOFF_MAX_S), and at once when chips free up or a node joins.
MAX_QUEUED_JOBS_PER_USER = env_int("MAX_QUEUED_JOBS_PER_USER", 5)
PLAN_BACKOFF_MIN_S = env_int("PLAN_BACKOFF_MIN_S", 2)
PLAN_BACKOFF_MAX_S = env_int("PLAN_BACKOFF_MAX_S", 60)
# A waiting spot job whose bid won chips must hold them within the notice period plus this, or its bid lapses.
SPOT_TAKE_UP_GRACE_S = env_int("SPOT_TAKE_UP_GRACE_S", 60)
# Simulated chips run the real model on a CPU, paced to their modelled speed divided by this
# fleet-wide factor, so that a tiny model takes visible time (hosts/runtime/pacing.py).
SIMULATION_SLOWDOWN = float(env("SIMULATION_SLOWDOWN", "20000"))
TRAINING_PYTHON = env("TRAINING_PYTHON", "")

# Money: the platform currency; amounts are integer micro-units (1 unit = 1,000,000).
CURRENCY = env("CURRENCY", "CNY")
CURRENCY_SYMBOL = env("CURRENCY_SYMBOL", "¥")
DEFAULT_TRIAL_CREDIT = env("DEFAULT_TRIAL_CREDIT", "10.00")

# Stripe top-ups. Without both keys the billing page says top-ups are not configured. STRIPE_API_BASE
# points the stripe library at a Stripe-compatible server (tests run localstripe); STRIPE_JS_URL is
# where the page loads Stripe.js from (localstripe serves a stand-in at <base>/js.stripe.com/v3/).
STRIPE_SECRET_KEY = env_secret("STRIPE_SECRET_KEY")
STRIPE_PUBLISHABLE_KEY = env("STRIPE_PUBLISHABLE_KEY")
STRIPE_WEBHOOK_SECRET = env_secret("STRIPE_WEBHOOK_SECRET")
STRIPE_API_BASE = env("STRIPE_API_BASE", "https://api.stripe.com")
STRIPE_JS_URL = env("STRIPE_JS_URL", "https://js.stripe.com/v3/")

# Production hardening; all on unless DEBUG or explicitly relaxed for plain-HTTP local mode.
SECURE_HTTPS = env_bool("SECURE_HTTPS", False)
SESSION_COOKIE_SECURE = SECURE_HTTPS
CSRF_COOKIE_SECURE = SECURE_HTTPS
SECURE_SSL_REDIRECT = SECURE_HTTPS
SECURE_HSTS_SECONDS = 31536000 if SECURE_HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HTTPS
# Preloading puts the domain into browsers' built-in HTTPS-only lists, which takes months to undo: the
# operator's decision (SECURE_HSTS_PRELOAD=1), never a default. Django's deploy check would flag it off.
SECURE_HSTS_PRELOAD = SECURE_HTTPS and env_bool("SECURE_HSTS_PRELOAD", False)
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if env_bool("BEHIND_PROXY") else None
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
CONTENT_SECURITY_POLICY = PAGE_CONTENT_POLICY  # portal.content_policy; the billing page adds Stripe.js

# ---- Operations: health, metrics, logs, mail ------------------------------------------------------
# docs/OPERATIONS.md describes each variable. /healthz and /readyz: portal/health.py; /metrics:
# portal/metrics.py; logs: portal/logs.py; Sentry: portal/sentry.py; mail: portal/mail_settings.py; the API schema:
# portal/api_schema.py.

# Prometheus: request metrics (the two middlewares wrap all others) and database metrics (the engine).
MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "portal.logs.RequestIdMiddleware",
    *MIDDLEWARE,
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]
PROMETHEUS_DB_METRICS = env_bool("PROMETHEUS_DB_METRICS", True)
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # portal/database: django-prometheus's engine (unless PROMETHEUS_DB_METRICS is off), its health check
    # skipped by a connection that answered within the last half second.
    DATABASES["default"]["ENGINE"] = "portal.database"
# Who may read /metrics: the bearer token, or these addresses; neither set: loopback only (portal.metrics_access).
METRICS_TOKEN = env_secret("METRICS_TOKEN")
METRICS_ALLOWED_NETWORKS = parse_networks(env("METRICS_ALLOWED_ADDRESSES"))
METRICS_TRUSTED_PROXIES = 1 if env_bool("BEHIND_PROXY") else 0

# Logs: JSON lines in production, a readable console format under DEBUG or `make run`; LOG_FORMAT overrides.
LOG_FORMAT = log_format(env("LOG_FORMAT"), DEBUG)
LOGGING = logging_config(LOG_FORMAT, env("LOG_LEVEL", "INFO"))
CELERY_WORKER_HIJACK_ROOT_LOGGER = False  # workers and beat log through LOGGING too

# Sentry, only when SENTRY_DSN is set.
SENTRY_DSN = env_secret("SENTRY_DSN")
SENTRY_ENABLED = init_sentry(
    SENTRY_DSN,
    environment=env("SENTRY_ENVIRONMENT"),
    release=env("SENTRY_RELEASE"),
    traces_sample_rate=float(env("SENTRY_TRACES_SAMPLE_RATE", "0") or 0),
)

# Mail: EMAIL_URL (dj-email-url), else the EMAIL_* variables; console when neither.
_mail = mail_settings(DATA_DIR)
EMAIL_BACKEND = _mail["EMAIL_BACKEND"]
EMAIL_FILE_PATH = _mail["EMAIL_FILE_PATH"]  # the file backend (launcher.private, file://)
EMAIL_HOST = _mail["EMAIL_HOST"]
EMAIL_PORT = _mail["EMAIL_PORT"]
EMAIL_HOST_USER = _mail["EMAIL_HOST_USER"]
EMAIL_HOST_PASSWORD = _mail["EMAIL_HOST_PASSWORD"]
EMAIL_USE_TLS = _mail["EMAIL_USE_TLS"]
EMAIL_USE_SSL = _mail["EMAIL_USE_SSL"]
EMAIL_TIMEOUT = _mail["EMAIL_TIMEOUT"]
DEFAULT_FROM_EMAIL = _mail["DEFAULT_FROM_EMAIL"]
SERVER_EMAIL = _mail.get("SERVER_EMAIL", DEFAULT_FROM_EMAIL)
