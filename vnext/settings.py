"""Settings, all read from the environment through one `environ.Env()` (see `.env.example`)."""

import os
import warnings
from datetime import timedelta
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from vnext.rates import parse_rate
from vnext.secret_key import derived_encryption_key, installation_secret_key

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
if (BASE_DIR / ".env").is_file():
    environ.Env.read_env(BASE_DIR / ".env")

DEBUG = env.bool("DEBUG", default=False)
# No public default: without SECRET_KEY the installation generates its own once, in var/
# (owner-only); `check --deploy` warns about it (vnext/secret_key.py). Production sets it.
SECRET_KEY_FILE = env.path("VNEXT_SECRET_KEY_FILE", default=BASE_DIR / "var" / "secret_key")


def _secret(name: str) -> str:
    """A secret as the environment holds it: django-environ would read a value that starts
    with `$` as the name of another variable, and secrets may start with one."""
    return os.environ.get(name, "")


SECRET_KEY_GENERATED = not _secret("SECRET_KEY")
SECRET_KEY = _secret("SECRET_KEY") or installation_secret_key(Path(SECRET_KEY_FILE))
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

# Production behind TLS (all off by default: `make run` serves plain HTTP on loopback). With them
# set, `manage.py check --deploy` is clean. Secure cookies: the session and CSRF cookies travel
# over HTTPS only. HSTS: browsers use HTTPS for this host (and its subdomains, and the preload
# list) for that many seconds; hard to undo, so start small. The SSL redirect answers plain HTTP
# with a redirect to HTTPS, except the paths SECURE_REDIRECT_EXEMPT lists (a load balancer's
# plain-HTTP health probe). Behind a proxy that ends TLS, SECURE_PROXY_SSL_HEADER names the
# header it sets and the value meaning HTTPS (`HTTP_X_FORWARDED_PROTO,https`): only set it when
# the proxy overwrites that header on every request, or a client could claim HTTPS.
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env.bool("VNEXT_SECURE_COOKIES", default=False)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=False)
SECURE_REDIRECT_EXEMPT = env.list("SECURE_REDIRECT_EXEMPT", default=[r"^health/?$"])
_PROXY_SSL_HEADER = env.list("SECURE_PROXY_SSL_HEADER", default=[])
if _PROXY_SSL_HEADER and len(_PROXY_SSL_HEADER) != 2:
    raise ImproperlyConfigured(
        "SECURE_PROXY_SSL_HEADER is `<header as in META>,<value>`: HTTP_X_FORWARDED_PROTO,https"
    )
SECURE_PROXY_SSL_HEADER = (
    (_PROXY_SSL_HEADER[0], _PROXY_SSL_HEADER[1]) if _PROXY_SSL_HEADER else None
)
# Django's defaults, stated: no MIME sniffing, referrer kept to this site, no framing.
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = env.str("SECURE_REFERRER_POLICY", default="same-origin")
X_FRAME_OPTIONS = "DENY"

INSTALLED_APPS = [
    # django.contrib.admin, with the project's admin site (vnext/admin_site.py).
    "vnext.apps.VNextAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "channels",
    "axes",
    "workflows",
    "instances",
    "locks",
]

MIDDLEWARE = [
    # First: every log line of a request carries its id (X-Request-ID in and out).
    "vnext.observability.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last: answers a request whose login attempt was refused for too many failures.
    "axes.middleware.AxesMiddleware",
]

# Failed logins (admin form, HTTP Basic on the API) are counted per username and address by
# django-axes; past the limit that pair is locked out for the cool-off (429, problem JSON on
# the API). Tokens are not guessable and are not counted.
# JWT bearer tokens issued by an identity provider or gateway: `sub` names an existing user,
# `roles` (VNEXT["JWT_ROLES_CLAIM"]) adds roles to its groups. HS256 with a shared key by
# default; set VNEXT_JWT_ALGORITHM=RS256 and VNEXT_JWT_VERIFYING_KEY for a provider's key.
SIMPLE_JWT = {
    "ALGORITHM": env("VNEXT_JWT_ALGORITHM", default="HS256"),
    # Not `env(..., default=SECRET_KEY)`: a default that starts with `$` (a generated key may)
    # is read as a variable's name, over and over (a RecursionError at start-up).
    "SIGNING_KEY": _secret("VNEXT_JWT_SIGNING_KEY") or SECRET_KEY,
    "VERIFYING_KEY": env("VNEXT_JWT_VERIFYING_KEY", default="") or None,
    "AUDIENCE": env("VNEXT_JWT_AUDIENCE", default="") or None,
    "ISSUER": env("VNEXT_JWT_ISSUER", default="") or None,
    "AUTH_HEADER_TYPES": ("Bearer",),
    "USER_ID_FIELD": "username",
    "USER_ID_CLAIM": env("VNEXT_JWT_USER_CLAIM", default="sub"),
    # Provider tokens carry neither simplejwt's token type nor necessarily a `jti`.
    "TOKEN_TYPE_CLAIM": None,
    "JTI_CLAIM": None,
}

AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env.int("VNEXT_LOGIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.float("VNEXT_LOGIN_COOLOFF_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "vnext.exception_handler.login_lockout_response"
AXES_VERBOSE = False
# The client address is REMOTE_ADDR, which uvicorn sets from X-Forwarded-For only for the proxies
# FORWARDED_ALLOW_IPS names: a header a client wrote never picks the address it is locked out by.
AXES_IPWARE_META_PRECEDENCE_ORDER = ("REMOTE_ADDR",)

ROOT_URLCONF = "vnext.urls"
ASGI_APPLICATION = "vnext.asgi.application"

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

# SQLite is the embedded default (`make run`); production and the test suite use PostgreSQL.
DATABASES = {
    "default": env.db_url(
        "DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'var' / 'vnext.sqlite3'}"
    ),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Django's backend, its per-request health check without a round trip while the server has
    # said nothing (vnext/postgresql/base.py).
    DATABASES["default"]["ENGINE"] = "vnext.postgresql"
DATABASE_POOL_MAX_SIZE = env.int("DATABASE_POOL_MAX_SIZE", default=0)
if DATABASE_POOL_MAX_SIZE and DATABASES["default"]["ENGINE"].endswith("postgresql"):
    # psycopg's pool: under ASGI every request otherwise opens a new PostgreSQL connection.
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1,
        "max_size": DATABASE_POOL_MAX_SIZE,
    }
else:
    DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("DATABASE_CONN_MAX_AGE", default=0))
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = env.bool(
        "DATABASE_CONN_HEALTH_CHECKS", default=False
    )
if env.bool("DATABASE_PREPARED_STATEMENTS", default=True) and DATABASES["default"][
    "ENGINE"
].endswith("postgresql"):
    # Server-side parameters, and statements run 5 times prepared on their connection: the
    # hot path's statements are planned once (a no-task transition 1.65 -> 0.89 ms in-process,
    # `make bench`). Django leaves this off for poolers in transaction mode (PgBouncer): set
    # DATABASE_PREPARED_STATEMENTS=false behind one.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        server_side_binding=True, prepare_threshold=5
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# Times to the second in the admin (vnext/formats/en/formats.py).
FORMAT_MODULE_PATH = ["vnext.formats"]

STATIC_URL = "static/"
STATIC_ROOT = env.path("STATIC_ROOT", default=BASE_DIR / "var" / "static")
STATICFILES_DIRS = [BASE_DIR / "static"]
# The ASGI application serves /static/ from the finders (no collectstatic step); a production
# deployment may put a CDN or web server in front. Django warns on every streamed file there.
warnings.filterwarnings("ignore", message="StreamingHttpResponse must consume synchronous")

REST_FRAMEWORK = {
    # JSON; start/transition/retry also read forms with bracket paths (instances.api.request_data).
    "DEFAULT_PARSER_CLASSES": ["vnext.parsers.JsonParser"],
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first: an anonymous API call then gets 401 with `WWW-Authenticate: Token`.
        "vnext.authentication.CachedTokenAuthentication",
        # `Authorization: Bearer <JWT>` from your identity provider (SIMPLE_JWT below).
        "rest_framework_simplejwt.authentication.JWTAuthentication",
        "rest_framework.authentication.SessionAuthentication",
        "vnext.authentication.CountedBasicAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["workflows.api.permissions.HasWorkflowRight"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "vnext.exception_handler.problem_exception_handler",
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
}

SPECTACULAR_SETTINGS = {
    "TITLE": "vNext workflow runtime",
    "DESCRIPTION": "Workflow definitions, instances, transitions and built-in functions.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI assets ship with the package: the docs page works without internet access.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {"InstanceStatusEnum": "instances.api.serializers.STATUSES"},
    # Errors are `application/problem+json`; bodies are typed per operation.
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "vnext.openapi.archived_instances_hook",
    ],
}

# Celery: an empty broker URL means the embedded mode (in-process job runner, no broker).
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="") or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"

CHANNEL_LAYER_URL = env.str("CHANNEL_LAYER_URL", default="")
CHANNEL_LAYERS = {
    "default": (
        {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [CHANNEL_LAYER_URL]},
        }
        if CHANNEL_LAYER_URL
        else {"BACKEND": "channels.layers.InMemoryChannelLayer"}
    )
}


def _rate(name: str, default: str) -> str | None:
    """A rate limit from the environment (`100/s`; empty: none), checked now: a malformed one
    refuses to start rather than failing every request it applies to."""
    rate = env.str(name, default=default).strip()
    if not rate:
        return None
    try:
        parse_rate(rate)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: {exc}") from None
    return rate


# The platform's own settings, read through `vnext.conf.vnext_setting` (defaults live there).
VNEXT = {
    "SCRIPT_TIMEOUT_SECONDS": env.float("VNEXT_SCRIPT_TIMEOUT_SECONDS", default=2.0),
    "SCRIPT_WORKERS": env.int("VNEXT_SCRIPT_WORKERS", default=0) or None,
    "SCRIPT_MEMORY_MB": env.int("VNEXT_SCRIPT_MEMORY_MB", default=512),
    "SCRIPT_WORKER_USER": env.str("VNEXT_SCRIPT_WORKER_USER", default="nobody"),
    "SCRIPT_MAX_PAYLOAD_BYTES": env.int("VNEXT_SCRIPT_MAX_PAYLOAD_BYTES", default=16 * 1024 * 1024),
    "SCRIPT_POOL_WAIT_SECONDS": env.float("VNEXT_SCRIPT_POOL_WAIT_SECONDS", default=10.0),
    "SCRIPT_CONFIGURATION": env.json("VNEXT_SCRIPT_CONFIGURATION", default={}),
    "SYNC_RETRY_WAIT_SECONDS": env.float("VNEXT_SYNC_RETRY_WAIT_SECONDS", default=10.0),
    "DATA_WRITE_WAIT_SECONDS": env.float("VNEXT_DATA_WRITE_WAIT_SECONDS", default=10.0),
    "HTTP_WORKERS": env.int("VNEXT_HTTP_WORKERS", default=0) or None,
    "HTTP_THREADS": env.int("VNEXT_HTTP_THREADS", default=8),
    "HTTP_ACCESS_LOG": env.bool("VNEXT_HTTP_ACCESS_LOG", default=False),
    "MAX_BODY_BYTES": env.int("VNEXT_MAX_BODY_BYTES", default=2_621_440),
    "BODY_READ_TIMEOUT_SECONDS": env.float("VNEXT_BODY_READ_TIMEOUT_SECONDS", default=30.0),
    "MAX_HEADER_BYTES": env.int("VNEXT_MAX_HEADER_BYTES", default=64 * 1024),
    # uvicorn's own variable name: the proxies trusted for X-Forwarded-For; empty: none.
    "FORWARDED_ALLOW_IPS": env.str("FORWARDED_ALLOW_IPS", default=""),
    "TOKEN_CACHE_SECONDS": env.float("VNEXT_TOKEN_CACHE_SECONDS", default=60.0),
    "TOKEN_CACHE_LOCAL_SECONDS": env.float("VNEXT_TOKEN_CACHE_LOCAL_SECONDS", default=1.0),
    "LONG_POLL_MAX_SECONDS": env.float("VNEXT_LONG_POLL_MAX_SECONDS", default=60.0),
    "LONG_POLL_RECHECK_SECONDS": env.float("VNEXT_LONG_POLL_RECHECK_SECONDS", default=5.0),
    "RATE_START_PER_CALLER": _rate("VNEXT_RATE_START_PER_CALLER", "200/s"),
    "RATE_START_PER_WORKFLOW": _rate("VNEXT_RATE_START_PER_WORKFLOW", "1000/s"),
    "RATE_LONG_POLL_PER_CALLER": _rate("VNEXT_RATE_LONG_POLL_PER_CALLER", "200/s"),
    "RATE_PUBLISH_PER_CALLER": _rate("VNEXT_RATE_PUBLISH_PER_CALLER", "20/s"),
    "MAX_PARKED_POLLS_PER_CALLER": env.int("VNEXT_MAX_PARKED_POLLS_PER_CALLER", default=200)
    or None,
    "EXAMPLES_DIR": BASE_DIR / "examples",
    "JOB_DISPATCH": env.str("VNEXT_JOB_DISPATCH", default="") or None,
    "JOB_LEASE_SECONDS": env.float("VNEXT_JOB_LEASE_SECONDS", default=30.0),
    "JOB_REDISPATCH_SECONDS": env.float("VNEXT_JOB_REDISPATCH_SECONDS", default=30.0),
    "JOB_MAX_ATTEMPTS": env.int("VNEXT_JOB_MAX_ATTEMPTS", default=5),
    "JOB_RETENTION_DAYS": env.float("VNEXT_JOB_RETENTION_DAYS", default=7.0),
    "FAILED_JOB_RETENTION_DAYS": env.float("VNEXT_FAILED_JOB_RETENTION_DAYS", default=90.0),
    "RETENTION_DAYS": env.int("VNEXT_RETENTION_DAYS", default=0) or None,
    "ARCHIVE_DIR": env.str("VNEXT_ARCHIVE_DIR", default="") or None,
    "ARCHIVE_BATCH_SIZE": env.int("VNEXT_ARCHIVE_BATCH_SIZE", default=500),
    # After each batch the archive rests this many times as long as the batch took (0: no rest).
    "ARCHIVE_YIELD_RATIO": env.float("VNEXT_ARCHIVE_YIELD_RATIO", default=1.0),
    "ARCHIVE_RUN_LIMIT": env.int("VNEXT_ARCHIVE_RUN_LIMIT", default=100_000),
    "BUSY_LEASE_SECONDS": env.float("VNEXT_BUSY_LEASE_SECONDS", default=300.0),
    "EMBEDDED_RUNNER_THREADS": env.int("VNEXT_EMBEDDED_RUNNER_THREADS", default=4),
    "FAN_OUT_MAX_CONCURRENT_ITEMS": env.int("VNEXT_FAN_OUT_MAX_CONCURRENT_ITEMS", default=64),
    "FUNCTION_CACHE_SECONDS": env.float("VNEXT_FUNCTION_CACHE_SECONDS", default=60.0),
    # Domains another vNext runtime serves (`payments=https://pay.example/api/v1,...`): trigger
    # tasks reach them over HTTP, with the token given here for each.
    "REMOTE_DOMAINS": env.dict("VNEXT_REMOTE_DOMAINS", default={}),
    "REMOTE_TOKENS": env.dict("VNEXT_REMOTE_TOKENS", default={}),
    "NOTIFICATION_CHANNEL": env.str(
        "VNEXT_NOTIFICATION_CHANNEL", default="instances.notifications.WebhookChannel"
    ),
    "NOTIFICATION_WEBHOOK_URL": env.str("VNEXT_NOTIFICATION_WEBHOOK_URL", default=""),
    "NOTIFICATION_SECRET": env.str("VNEXT_NOTIFICATION_SECRET", default="") or None,
    "NOTIFICATION_TIMEOUT_SECONDS": env.float("VNEXT_NOTIFICATION_TIMEOUT_SECONDS", default=10.0),
    "NOTIFICATION_REDIS_URL": env.str(
        "VNEXT_NOTIFICATION_REDIS_URL", default="redis://127.0.0.1:6379/0"
    ),
    "NOTIFICATION_REDIS_CHANNEL": env.str(
        "VNEXT_NOTIFICATION_REDIS_CHANNEL", default="vnext-notifications"
    ),
    # Outgoing calls reach public addresses only, and these hosts and networks (comma
    # separated: `mock.internal,localhost:3001` and `10.20.0.0/16`); `make run` allows its mock.
    "EGRESS_ALLOW_HOSTS": env.list("VNEXT_EGRESS_ALLOW_HOSTS", default=[]),
    "EGRESS_ALLOW_CIDRS": env.list("VNEXT_EGRESS_ALLOW_CIDRS", default=[]),
    # `/metrics` wants `Authorization: Bearer <token>` when set (else it is open, like /health).
    "METRICS_TOKEN": env.str("VNEXT_METRICS_TOKEN", default="") or None,
    # The admin's diagrams: "auto" (Graphviz when `dot` is installed), "graphviz" or "builtin".
    "DIAGRAM_RENDERER": env.str("VNEXT_DIAGRAM_RENDERER", default="auto"),
    "UNINDEXED_WARN_ROWS": env.int("VNEXT_UNINDEXED_WARN_ROWS", default=100_000),
    # Request headers scripts and job rows never get; unset: `*auth*,*token*,...` (vnext/conf.py).
    "HEADER_DENY_PATTERNS": env.list("VNEXT_HEADER_DENY_PATTERNS", default=None),
    "MAX_PAGE_OFFSET": env.int("VNEXT_MAX_PAGE_OFFSET", default=10_000),
    "BATCH_MAX_ITEMS": env.int("VNEXT_BATCH_MAX_ITEMS", default=100_000),
    "BATCH_CHUNK": env.int("VNEXT_BATCH_CHUNK", default=200),
    # Event intake (`manage.py events_consume`): the routes as JSON (a list of objects).
    "EVENT_ROUTES": env.json("VNEXT_EVENT_ROUTES", default=[]),
    "EVENT_RABBITMQ_URL": env.str(
        "VNEXT_EVENT_RABBITMQ_URL", default="amqp://guest:guest@127.0.0.1:5672//"
    ),
    "EVENT_REDIS_URL": env.str("VNEXT_EVENT_REDIS_URL", default="redis://127.0.0.1:6379/0"),
    "EVENT_PREFETCH": env.int("VNEXT_EVENT_PREFETCH", default=10),
    "EVENT_CONCURRENCY": env.int("VNEXT_EVENT_CONCURRENCY", default=1),
    "EVENT_MAX_ATTEMPTS": env.int("VNEXT_EVENT_MAX_ATTEMPTS", default=5),
    "EVENT_RETRY_SECONDS": env.float("VNEXT_EVENT_RETRY_SECONDS", default=1.0),
    "EVENT_RETRY_MAX_SECONDS": env.float("VNEXT_EVENT_RETRY_MAX_SECONDS", default=60.0),
    "EVENT_UNMATCHED": env.str("VNEXT_EVENT_UNMATCHED", default="retry"),
    "EVENT_REDIS_GROUP": env.str("VNEXT_EVENT_REDIS_GROUP", default="vnext"),
    "EVENT_REDIS_CLAIM_IDLE_SECONDS": env.float(
        "VNEXT_EVENT_REDIS_CLAIM_IDLE_SECONDS", default=30.0
    ),
    "EVENT_METRICS_PORT": env.int("VNEXT_EVENT_METRICS_PORT", default=0) or None,
    # Outbound instance events: subscriptions and targets as JSON (see vnext/conf.py).
    "OUTBOX_SUBSCRIPTIONS": env.json("VNEXT_OUTBOX_SUBSCRIPTIONS", default={}),
    "OUTBOX_TARGETS": env.json("VNEXT_OUTBOX_TARGETS", default={}),
    "OUTBOX_BATCH_SIZE": env.int("VNEXT_OUTBOX_BATCH_SIZE", default=500),
    "OUTBOX_POLL_SECONDS": env.float("VNEXT_OUTBOX_POLL_SECONDS", default=0.2),
    "OUTBOX_RETENTION_HOURS": env.float("VNEXT_OUTBOX_RETENTION_HOURS", default=24.0),
    # Pub/sub targets and state stores of task types 4, 17, 18 as JSON (see vnext/conf.py).
    "PUBSUB_TARGETS": env.json("VNEXT_PUBSUB_TARGETS", default={}),
    "STATE_STORES": env.json("VNEXT_STATE_STORES", default={}),
    "DEFAULT_STATE_STORE": env.str("VNEXT_DEFAULT_STATE_STORE", default="statestore"),
}
# One limit on request bodies: the serving layer's (read before a thread is taken) and Django's.
DATA_UPLOAD_MAX_MEMORY_SIZE = VNEXT["MAX_BODY_BYTES"]

# Master-schema fields encrypted at rest (x-encryption `encrypt`): Fernet keys, comma separated;
# the first seals, every one opens (rotation: put the new key first, keep the old ones until
# nothing sealed with them is left). Unset: when DEBUG, or on the installation's generated
# SECRET_KEY (`make run`, the test suite), a key derived from SECRET_KEY (`check --deploy` warns);
# else none, and publish refuses a schema that encrypts a field.
ENCRYPTION_KEYS_DERIVED = not env.list("VNEXT_ENCRYPTION_KEYS", default=[]) and (
    DEBUG or SECRET_KEY_GENERATED
)
VNEXT["ENCRYPTION_KEYS"] = (
    [derived_encryption_key(SECRET_KEY)]
    if ENCRYPTION_KEYS_DERIVED
    else env.list("VNEXT_ENCRYPTION_KEYS", default=[])
)

# Django's cache: the built-in function answers, the callers' grants and tokens. In-process by
# default; a shared one (`CACHE_URL=redis://127.0.0.1:6379/2`) serves every server process.
CACHES = {"default": env.cache("CACHE_URL", default="locmemcache://")}

# One JSON object per line (`LOG_FORMAT=json`, the default): time, level, logger, message, and the
# operation's request_id / instance_id / transition / job_id; `LOG_FORMAT=plain` for people.
LOG_FORMAT = env.str("LOG_FORMAT", default="json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {
            "()": "vnext.observability.FieldsFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
        },
        "json": {"()": "vnext.observability.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain" if LOG_FORMAT == "plain" else "json",
        }
    },
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # httpx logs every request at INFO (~50 us each, a fan-out's items by the hundred);
        # the task journal and the HTTP task's own log lines already say what was called.
        "httpx": {"level": "WARNING"},
    },
}
