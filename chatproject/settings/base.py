"""Django settings: every value comes from the environment (see docs/configuration.md)."""

from __future__ import annotations

from datetime import timedelta

import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured

from core.config import (
    BASE_DIR,
    answer_cache_config_from_env,
    chat_limits_from_env,
    context_config_from_env,
    deployment_config_from_env,
    embedding_config_from_env,
    engine_config_from_env,
    env,
    memory_config_from_env,
    model_store_config_from_env,
    moderation_config_from_env,
    outage_config_from_env,
    redis_connection_config_from_env,
    scheduler_config_from_env,
    stream_config_from_env,
    worker_config_from_env,
)
from core.logs import logging_config
from core.redis_options import broker_transport, broker_transport_options, broker_url, broker_use_ssl
from scheduling.gate import parse_gates

django_stubs_ext.monkeypatch()

SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="dev-insecure-change-me")
DEBUG = env.bool("DJANGO_DEBUG", default=False)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])
DEMO_PASSWORD = env.str("DEMO_PASSWORD", default="demo")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "django_eventstream",
    "axes",
    "accounts",
    "deployments",
    "model_routing",
    "chats",
    "moderation",
    "answer_cache",
    "memory",
    "runs",
    "feedback",
    "rollouts",
    "inference_workers",
    "web",
    "openai_api",
    "monitoring",
]

MIDDLEWARE = [
    "core.request_id.RequestIdMiddleware",  # first: every later step's log lines carry the request's id
    "core.errors.BackendOutageMiddleware",  # a Redis or Postgres outage met by any view: 503 + Retry-After
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last: turns a login that axes locked out into 429 + Retry-After (accounts/login_throttle.py).
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "chatproject.urls"
ASGI_APPLICATION = "chatproject.asgi.application"
AUTH_USER_MODEL = "accounts.User"

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
            ],
        },
    },
]

DATABASES = {"default": env.db("DATABASE_URL", default="postgres://chat:chat@127.0.0.1:5432/chat")}
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DB_CONN_MAX_AGE", default=0)
# Each process keeps a pool of Postgres connections (psycopg_pool, Django's "pool" option): a request or a task
# takes one and gives it back when Django closes it, instead of opening one each time (a Postgres backend to fork
# and authenticate: most of Postgres' CPU per run before the pool). 0: no pool, a connection per request (or one
# kept DB_CONN_MAX_AGE seconds). The worker's task threads each hold one for a whole run, so its pool needs at least
# ENGINE_MAX_NUM_SEQS; every process's pool together must stay under Postgres' max_connections.
DB_POOL_MAX_SIZE = env.int("DB_POOL_MAX_SIZE", default=40)
DB_POOL_TIMEOUT_S = env.float("DB_POOL_TIMEOUT_S", default=10.0)
if DB_POOL_MAX_SIZE > 0:
    if DATABASES["default"]["CONN_MAX_AGE"]:
        raise ImproperlyConfigured(
            "DB_CONN_MAX_AGE must be 0 while the connection pool is on (DB_POOL_MAX_SIZE > 0): set one of them to 0."
        )
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": min(2, DB_POOL_MAX_SIZE),
        "max_size": DB_POOL_MAX_SIZE,
        "timeout": DB_POOL_TIMEOUT_S,
    }
# Values travel apart from the SQL, and a statement run DB_PREPARE_THRESHOLD times on a connection is prepared: Postgres
# plans a hot statement once per pooled connection instead of once per run (Django's default binds on the client,
# quoting every value into the text, so each statement is parsed and planned afresh: bench/run_path_cost.py). Off for
# a pooler that cannot keep prepared statements (PgBouncer in transaction mode before 1.21).
if env.bool("DB_SERVER_SIDE_BINDING", default=True):
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        server_side_binding=True, prepare_threshold=env.int("DB_PREPARE_THRESHOLD", default=5)
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Seconds a web process keeps an API token's user (tier, limits) in memory (accounts/authentication.py; 0: off).
API_TOKEN_CACHE_S = env.float("API_TOKEN_CACHE_S", default=5.0)
REDIS_URL = env.str("REDIS_URL", default="redis://127.0.0.1:6379/0")
# GET /metrics (Prometheus): open when empty, else it needs "Authorization: Bearer <METRICS_TOKEN>".
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")
# Sentinel and TLS for every Redis connection, Celery's broker included (docs/high-availability.md).
REDIS_CONNECTION = redis_connection_config_from_env()
_BROKER_REDIS_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL)
CELERY_BROKER_URL = broker_url(_BROKER_REDIS_URL, REDIS_CONNECTION)
CELERY_BROKER_USE_SSL = broker_use_ssl(_BROKER_REDIS_URL, REDIS_CONNECTION)
CELERY_BROKER_TRANSPORT = broker_transport(REDIS_CONNECTION, _BROKER_REDIS_URL)
# Celery takes CELERY_BROKER_URL from the environment over this module (the raw URL, not the Sentinel one); its
# read and write URLs come before both, so every connection of the app uses the derived one.
CELERY_BROKER_READ_URL = CELERY_BROKER_WRITE_URL = CELERY_BROKER_URL

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
LOGIN_URL = "/login/"
# The largest request body any endpoint reads (Django's default, stated): a 413 above it, on /api and /v1 alike.
DATA_UPLOAD_MAX_MEMORY_SIZE = 2_621_440

# Login throttling (django-axes, accounts/login_throttle.py): every password check (the token API, /login/,
# /admin/login/) goes through authenticate(request=...), which the axes backend guards first.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_HANDLER = "accounts.login_throttle.LoginAttemptHandler"  # failures in Postgres: shared by every replica
AXES_FAILURE_LIMIT = env.int("AUTH_LOCKOUT_FAILURES", default=5)
AXES_COOLOFF_TIME = timedelta(seconds=env.int("AUTH_LOCKOUT_COOLOFF_S", default=900))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]  # an account (any address) or an address (any account)
AXES_RESET_ON_SUCCESS = True  # the account's own failures only (LoginAttemptHandler.reset_user_attempts)
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False  # a lockout ends when its Retry-After said
AXES_LOCKOUT_CALLABLE = "accounts.login_throttle.lockout_response"
AXES_CLIENT_IP_CALLABLE = "accounts.login_throttle.client_ip"
AUTH_PROXY_COUNT = env.int("AUTH_PROXY_COUNT", default=0)
AXES_DISABLE_ACCESS_LOG = True  # no row per successful login (the table would only grow)
AXES_VERBOSE = False  # no start-up banner in every process's log; failures are still logged (with the lockout keys)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.CachedTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # DRF's JSONParser with bounds: the body's size before it is read, its nesting before it is parsed.
    "DEFAULT_PARSER_CLASSES": ["core.http.parsers.BoundedJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "core.errors.api_exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Chat serving API",
    "DESCRIPTION": "Chats, messages and runs; runs stream their tokens over SSE.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
}

ENGINE = engine_config_from_env()
DEPLOYMENTS = deployment_config_from_env()
MODEL_STORE = model_store_config_from_env()
if MODEL_STORE.cache_mode not in ("shared", "per_host"):  # a typo must not silently mean "shared"
    raise ImproperlyConfigured(f"MODEL_CACHE_MODE must be 'shared' or 'per_host', not {MODEL_STORE.cache_mode!r}.")
STREAMS = stream_config_from_env()
CHAT_LIMITS = chat_limits_from_env()
WORKERS = worker_config_from_env()
SCHEDULER = scheduler_config_from_env()
parse_gates(SCHEDULER.gates_spec)  # a malformed SCHED_GATES fails at start, not when the dispatcher builds
CONTEXT = context_config_from_env()
OUTAGES = outage_config_from_env()
EMBEDDINGS = embedding_config_from_env()
MODERATION = moderation_config_from_env()
ANSWER_CACHE = answer_cache_config_from_env()
MEMORY = memory_config_from_env()

# One stderr handler for every process (web, dispatcher, workers: see chatproject/celery.py); docs/operations.md "Logs".
LOG_FORMAT = env.str("LOG_FORMAT", default="plain")
LOGGING = logging_config(log_format=LOG_FORMAT, level=env.str("LOG_LEVEL", default="INFO"))

# Celery: one queue per tier, consumed in strict order by workers (see inference_workers).
CELERY_TASK_QUEUES_ORDER = ["pro", "plus", "free", "batch"]
CELERY_TASK_DEFAULT_QUEUE = "free"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TRACK_STARTED = True
CELERY_TASK_IGNORE_RESULT = True
CELERY_WORKER_SEND_TASK_EVENTS = True
# Flower's "sent" state: one more publish per dispatched run from the dispatcher (bench/dispatcher_ceiling.py).
CELERY_TASK_SEND_SENT_EVENT = env.bool("CELERY_TASK_SEND_SENT_EVENT", default=True)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {
    # Longer than the longest run: an unacked task is redelivered only after its worker is gone.
    "visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT_S", default=3600),
    # Queues listed first are drained first (the default is round robin; "sorted" is not what we want).
    "queue_order_strategy": "priority",
    # Prefix for every broker key: lets several independent stacks share one Redis database (the browser
    # tests' worker must not take tasks meant for another test worker). Empty: no prefix.
    "global_keyprefix": env.str("CELERY_BROKER_KEY_PREFIX", default=""),
    # Under Sentinel: the primary's name and how to reach the Sentinels (empty without REDIS_SENTINELS).
    **broker_transport_options(
        REDIS_CONNECTION,
        socket_timeout=OUTAGES.redis_socket_timeout_s,
        socket_connect_timeout=OUTAGES.redis_connect_timeout_s,
    ),
}
