"""Relay settings. Every environment variable Relay reads is read here, and only here.

Each value is parsed strictly: a value that cannot be used stops start-up with an
ImproperlyConfigured error that names the variable, instead of a confusing failure later.
"""
import hashlib
import ipaddress
import os
import re
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import environ
from kombu import Exchange, Queue
from django.core.exceptions import ImproperlyConfigured

from core import task_names  # names only: it imports nothing

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
# Where `make run` keeps its files: the SQLite database, the broker's folders, static
# files, and the development values in relay.env.
VAR_DIR = Path(env.str("RELAY_VAR_DIR", default=str(BASE_DIR / "var"))).resolve()
# `make run` keeps the random secret key of this checkout in this file, so that
# manage.py commands in another terminal start with the same key. Only that key is read
# from it: debug is on in `make run`'s own processes alone (scripts/run.sh), never in a
# process that merely starts in this checkout. The environment wins over the file.
ENV_FILE = Path(env.str("RELAY_ENV_FILE", default=str(VAR_DIR / "relay.env")))
if ENV_FILE.is_file():
    for _line in ENV_FILE.read_text().splitlines():
        _name, _, _value = _line.strip().partition("=")
        if _name == "DJANGO_SECRET_KEY" and _value:
            os.environ.setdefault(_name, _value)


def _int(name: str, default: int, *, minimum: int = 0) -> int:
    raw = env.str(name, default=str(default)).strip()
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


def _bool(name: str, default: bool) -> bool:
    raw = env.str(name, default="true" if default else "false").strip().lower()
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off", ""):
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, got {raw!r}")


def _choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = env.str(name, default=default).strip()
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _rate(name: str, default: str) -> str:
    value = env.str(name, default=default).strip()
    count, _, period = value.partition("/")
    if not count.isdigit() or period not in ("second", "minute", "hour", "day", "s", "m", "h", "d"):
        raise ImproperlyConfigured(f"{name} must look like 20/hour, got {value!r}")
    return value


# --- Django core -----------------------------------------------------------------------
DEBUG = _bool("DJANGO_DEBUG", False)
DEV_SECRET_KEY = "relay-dev-only-secret-key-never-use-it-in-production-0123456789"
SECRET_KEY = env.str("DJANGO_SECRET_KEY", default=DEV_SECRET_KEY if DEBUG else "")
# What Django's check --deploy calls a strong key: 50 characters, 5 different ones.
if not DEBUG and (SECRET_KEY == DEV_SECRET_KEY or len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5):
    raise ImproperlyConfigured(
        "DJANGO_SECRET_KEY must be set to a random value of at least 50 characters when DJANGO_DEBUG is false "
        "(e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(50))')")
# Earlier secret keys, still accepted where Django signs with the key, and still able to
# decrypt the domains' DKIM keys (domains/keys.py) after a rotation.
SECRET_KEY_FALLBACKS = [key for key in env.list("DJANGO_SECRET_KEY_FALLBACKS", default=[]) if key]
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]", "testserver"])
# Debug pages show code, settings and requests: never where anything but this machine
# can reach them.
_LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1", "testserver"}
if DEBUG and set(ALLOWED_HOSTS) - _LOOPBACK_HOSTS:
    raise ImproperlyConfigured("DJANGO_DEBUG may be true only while DJANGO_ALLOWED_HOSTS names this machine alone "
                               f"(127.0.0.1, localhost, [::1]); it names {sorted(set(ALLOWED_HOSTS) - _LOOPBACK_HOSTS)}")
# An error page or report (debug, or mailed to admins) shows no frame's local variables:
# a key being used (a domain's DKIM key, a token) would be one of them.
DEFAULT_EXCEPTION_REPORTER_FILTER = "config.reporting.NoLocalsFilter"

INSTALLED_APPS = [
    # django.contrib.admin, with the operator's first screen as its index (api/admin_site.py).
    "api.apps.RelayAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "axes",
    "accounts",
    "mailboxes",
    "domains",
    "relay",
    "expiry",
    "webhooks",
    "checks",
    "api",
    "inbox",
    # The OAuth toolkit: its grants and tokens (its consent page is inbox.views.Consent).
    "oauth2_provider",
]

MIDDLEWARE = [
    "api.middleware.JsonErrorsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Serves the admin's and the API docs' static files under gunicorn too.
    "api.middleware.StaticFilesMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Locks out an admin login after repeated failures (django-axes); last, as it asks.
    "axes.middleware.AxesMiddleware",
]
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

try:
    DATABASES = {"default": env.db_url("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'relay.sqlite3'}")}
except (ImproperlyConfigured, ValueError, KeyError) as exc:
    raise ImproperlyConfigured(f"DATABASE_URL is not a usable database URL: {exc}") from None
if DATABASES["default"]["ENGINE"] not in ("django.db.backends.postgresql", "django.db.backends.sqlite3"):
    raise ImproperlyConfigured(f"DATABASE_URL must be a postgres:// or sqlite:/// URL, got {env.str('DATABASE_URL')!r}")
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Web, worker, beat and smtp share one SQLite file: wait for the write lock instead
    # of failing at once, and use WAL so readers never block the writer.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"timeout": 30, "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"}
    )
else:
    # Kept open for reuse in workers, beat, smtp and mailer; closed after each request in
    # the ASGI web process (see config/asgi.py), where connections belong to per-request threads.
    DATABASES["default"]["CONN_MAX_AGE"] = 0 if env.bool("RELAY_SERVING_ASGI", default=False) else _int(
        "DATABASE_CONN_MAX_AGE", 60)
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("connect_timeout", 5)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# The cache holds the per-client rate limits, so it must be one store that every web
# process shares: CACHE_URL if set, else the Redis broker, else a database table
# (created by api's migration). Never per-process memory: `gunicorn -w 3` would allow
# three times each limit.
# The host part only keeps kombu from warning "No hostname was supplied" on every connection.
_broker_url = env.str("CELERY_BROKER_URL", default="filesystem://localhost/")
if env.str("CACHE_URL", default=""):
    try:
        CACHES = {"default": env.cache_url("CACHE_URL")}
    except (ImproperlyConfigured, ValueError, KeyError) as exc:
        raise ImproperlyConfigured(f"CACHE_URL is not a usable cache URL: {exc}") from None
elif _broker_url.startswith(("redis://", "rediss://")):
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": _broker_url,
                          "KEY_PREFIX": "relay-cache",
                          "OPTIONS": {"socket_timeout": 5, "socket_connect_timeout": 5}}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": "relay_cache"}}

# Where new-message and mailbox-ended events are published for waiting clients
# (mailboxes/wakeups.py, api/waiting.py): Redis, from CACHE_URL or the broker. Without one,
# waiters poll the database.
_cache_url = env.str("CACHE_URL", default="")
RELAY_EVENTS_REDIS_URL = env.str(
    "RELAY_EVENTS_REDIS_URL",
    default=(_cache_url.replace("rediscache://", "redis://", 1) if _cache_url.startswith(("redis", "rediscache"))
             else _broker_url if _broker_url.startswith(("redis://", "rediss://")) else ""))

# The web inbox's sessions: read from the shared cache, written through to the database.
SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"
# A form refused for CSRF gets the web inbox's page saying so (the API takes no cookies).
CSRF_FAILURE_VIEW = "inbox.views.csrf_failure"
LANGUAGE_CODE = "en"
# The web inbox's pages are in English and Spanish, by the browser's Accept-Language (the
# inbox activates it; the API stays in English).
LANGUAGES = [("en", "English"), ("es", "Español")]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
# Filled by `collectstatic` (make run, the Dockerfile); whitenoise serves it.
STATIC_ROOT = VAR_DIR / "static"
# Hashed names and gzip copies, made by collectstatic: whitenoise serves a hashed name with a
# far-future, immutable Cache-Control, so a browser asks for the inbox's CSS and JS once
# per deploy. A name missing from the manifest falls back to the plain one (not a 500).
STORAGES = {"default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
            "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"}}
WHITENOISE_MANIFEST_STRICT = False


LOG_LEVEL = _choice("RELAY_LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR"))
# Celery's "Task ... received / succeeded" lines for every task (off: they are mostly the
# sweep saying nothing happened; config/celery.py).
RELAY_LOG_TASKS = _bool("RELAY_LOG_TASKS", False)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        **{name: {"handlers": ["console"], "level": LOG_LEVEL, "propagate": False}
           for name in ("accounts", "mailboxes", "expiry", "relay", "api")},
        # A client's 4xx is the client's business (the response says what was wrong);
        # server errors are still logged, with their traceback.
        "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False},
        "django.security.RequestDataTooBig": {"handlers": ["console"], "level": "ERROR", "propagate": False},
    },
}

# Reverse proxies in front of the web process. With N, the client address is the N-th
# entry of X-Forwarded-For from the right (what the outermost trusted proxy saw); with 0,
# X-Forwarded-For is ignored and only REMOTE_ADDR counts, so a client cannot forge it.
RELAY_TRUSTED_PROXIES = _int("RELAY_TRUSTED_PROXIES", 0)
if RELAY_TRUSTED_PROXIES:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Served over HTTPS (directly or behind a TLS-terminating proxy): redirect plain HTTP,
# mark cookies secure, send HSTS. `check --deploy` passes with it on.
RELAY_HTTPS = _bool("RELAY_HTTPS", False)
SECURE_SSL_REDIRECT = RELAY_HTTPS
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = RELAY_HTTPS
SECURE_HSTS_SECONDS = 31_536_000 if RELAY_HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_PRELOAD = RELAY_HTTPS
# The probes answer over plain HTTP too: orchestrators call them inside the network.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]

# Admin logins: after 5 failures for one username from one address, that pair is locked
# out for 15 minutes (429).
AXES_FAILURE_LIMIT = 5
AXES_COOLOFF_TIME = timedelta(minutes=15)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_CLIENT_IP_CALLABLE = "core.client_address.client_group_of"
AXES_RESET_ON_SUCCESS = True

# --- REST API --------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["api.authentication.BearerAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["api.authentication.IsPrincipal"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["api.parsers.JSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # The page size is api.pagination.RelayPagination's own.
    "DEFAULT_PAGINATION_CLASS": "api.pagination.RelayPagination",
    "EXCEPTION_HANDLER": "api.errors.exception_handler",
    "UNAUTHENTICATED_USER": None,
    # Sign-up, activation and recovery share RELAY_SIGNUP_RATE, each route its own budget.
    "DEFAULT_THROTTLE_RATES": {
        "anon_create": _rate("RELAY_ANON_CREATE_RATE", "20/hour"),
        **{scope: _rate("RELAY_SIGNUP_RATE", "10/hour")
           for scope in ("signup", "activate", "recover", "recover_confirm", "sign_in", "sign_in_check")},
        "oauth_register": _rate("RELAY_OAUTH_REGISTER_RATE", "20/hour"),
    },
}
# Relay's own version: the API schema's and the MCP server's (serverInfo).
RELAY_VERSION = "1.1.0"

SPECTACULAR_SETTINGS = {
    "TITLE": "Relay API",
    "DESCRIPTION": "Disposable, expiring email mailboxes.",
    "VERSION": RELAY_VERSION,
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI from this app (drf-spectacular-sidecar), not from a CDN: the docs work
    # offline, and the page where people paste keys loads no third-party script.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "SWAGGER_UI_SETTINGS": {"persistAuthorization": True},
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "api.schema.add_error_responses"],
    "ENUM_NAME_OVERRIDES": {
        "MailboxStatusEnum": "mailboxes.models.MailboxStatus",
        "OutboundStatusEnum": "relay.models.OutboxStatus",
        "AccountStatusEnum": "accounts.models.AccountStatus",
    },
}

# How long each web process may keep what an API key resolved to (accounts.services).
# Revocations do not wait for it: each one is announced through Redis and empties every
# process's cache before its next request (accounts.credentials); this only bounds an
# entry's age should an announcement fail. Without Redis nothing is cached.
# 0: look the key up on every request.
RELAY_KEY_CACHE_SECONDS = _int("RELAY_KEY_CACHE_SECONDS", 5)
# Long-poll waits and event streams one key or mailbox token may hold open at once.
RELAY_MAX_OPEN_WAITS = _int("RELAY_MAX_OPEN_WAITS", 20, minimum=1)
# Live API keys one account may hold (POST /keys past it is 429 quota_exceeded).
RELAY_MAX_API_KEYS = _int("RELAY_MAX_API_KEYS", 20, minimum=1)
# The key or mailbox token `manage.py runmcp` acts with when --key is not given (docs/agents.md).
RELAY_API_KEY = env.str("RELAY_API_KEY", default="")

# --- Relay -----------------------------------------------------------------------------
RELAY_DOMAINS = [d.strip().lower() for d in env.list("RELAY_DOMAINS", default=["relay.localhost"]) if d.strip()]
if not RELAY_DOMAINS:
    raise ImproperlyConfigured("RELAY_DOMAINS must name at least one domain")

# Role addresses (RFC 2142, and those certificate authorities mail for domain
# validation) are never handed out: addresses are never reused, so a squatter would
# hold one for good.
ROLE_LOCAL_PARTS = ("abuse", "admin", "administrator", "ftp", "hostmaster", "info", "marketing", "news", "noc",
                    "postmaster", "sales", "security", "support", "usenet", "uucp", "webmaster", "www")
RELAY_RESERVED_LOCAL_PARTS = frozenset(
    ROLE_LOCAL_PARTS + tuple(p.strip().lower() for p in env.list("RELAY_RESERVED_LOCAL_PARTS", default=[]) if p.strip()))

# --- Domains of one's own, and mail one can trust (docs/configuration.md, "Domains and verdicts") ----
def _dns_resolvers() -> list[tuple[str, int]]:
    """RELAY_DNS_RESOLVERS: a comma list of `ip` or `ip:port` (`[v6]:port` for IPv6).
    Empty: the system's resolvers (/etc/resolv.conf)."""
    servers = []
    for item in (part.strip() for part in env.str("RELAY_DNS_RESOLVERS", default="").split(",")):
        if not item:
            continue
        host, port = item, "53"
        if item.startswith("["):
            host, _, port = item[1:].partition("]")
            port = port.removeprefix(":") or "53"
        elif item.count(":") == 1:
            host, _, port = item.partition(":")
        try:
            ipaddress.ip_address(host)
            if not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError
        except ValueError:
            raise ImproperlyConfigured(f"RELAY_DNS_RESOLVERS must be a comma list of ip or ip:port, got {item!r}") from None
        servers.append((host, int(port)))
    return servers


RELAY_DNS_RESOLVERS = _dns_resolvers()
try:
    RELAY_DNS_TIMEOUT_SECONDS = float(env.str("RELAY_DNS_TIMEOUT_SECONDS", default="2"))
except ValueError:
    raise ImproperlyConfigured("RELAY_DNS_TIMEOUT_SECONDS must be a number of seconds") from None
if not 0 < RELAY_DNS_TIMEOUT_SECONDS <= 30:
    raise ImproperlyConfigured(f"RELAY_DNS_TIMEOUT_SECONDS must be above 0 and at most 30, got {RELAY_DNS_TIMEOUT_SECONDS}")
RELAY_MX_HOST = env.str("RELAY_MX_HOST", default=f"mx.{RELAY_DOMAINS[0]}").strip().lower().rstrip(".")
RELAY_DKIM_SELECTOR = env.str("RELAY_DKIM_SELECTOR", default="relay").strip().lower()
if not re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", RELAY_DKIM_SELECTOR):
    raise ImproperlyConfigured(f"RELAY_DKIM_SELECTOR must be one DNS label, got {RELAY_DKIM_SELECTOR!r}")
RELAY_DKIM_PRIVATE_KEY_FILE = env.str("RELAY_DKIM_PRIVATE_KEY_FILE", default="").strip()
if RELAY_DKIM_PRIVATE_KEY_FILE and not os.access(RELAY_DKIM_PRIVATE_KEY_FILE, os.R_OK):
    raise ImproperlyConfigured(f"RELAY_DKIM_PRIVATE_KEY_FILE names {RELAY_DKIM_PRIVATE_KEY_FILE!r}, "
                               "which is not a readable file")
# The authserv-id the mail server in front of the backend writes in its own
# Authentication-Results (and strips from incoming mail): required with a mail server as
# the backend, checked below. No default: a sender could guess one and write the header.
RELAY_AUTHSERV_ID = env.str("RELAY_AUTHSERV_ID", default="").strip().lower()
# false: runsmtp stores mail without checking SPF, DKIM and DMARC (verdict none), for mail
# that only ever comes through a relay that checked it already; and the benchmarks' baseline.
RELAY_SMTP_VERDICTS = _bool("RELAY_SMTP_VERDICTS", True)
# Custom domains one account may have, per plan: RELAY_MAX_DOMAINS=free=0,pro=5,enterprise=50
# (a plan left out keeps its default).
RELAY_MAX_DOMAINS = {"free": 0, "pro": 5, "enterprise": 50}
for _item in (part.strip() for part in env.str("RELAY_MAX_DOMAINS", default="").split(",")):
    if not _item:
        continue
    _plan, _, _count = _item.partition("=")
    if _plan.strip() not in RELAY_MAX_DOMAINS or not _count.strip().isdigit():
        raise ImproperlyConfigured(f"RELAY_MAX_DOMAINS must look like free=0,pro=5,enterprise=50, got {_item!r}")
    RELAY_MAX_DOMAINS[_plan.strip()] = int(_count)

RELAY_MIN_TTL_MS = _int("RELAY_MIN_TTL_MS", 300_000, minimum=1)
RELAY_MAX_TTL_MS = _int("RELAY_MAX_TTL_MS", 604_800_000, minimum=1)
RELAY_DEFAULT_TTL_MS = _int("RELAY_DEFAULT_TTL_MS", 86_400_000, minimum=1)
if RELAY_MIN_TTL_MS > RELAY_MAX_TTL_MS:
    raise ImproperlyConfigured(
        f"RELAY_MIN_TTL_MS ({RELAY_MIN_TTL_MS}) must not exceed RELAY_MAX_TTL_MS ({RELAY_MAX_TTL_MS})"
    )
if not RELAY_MIN_TTL_MS <= RELAY_DEFAULT_TTL_MS:
    raise ImproperlyConfigured(
        f"RELAY_DEFAULT_TTL_MS ({RELAY_DEFAULT_TTL_MS}) must be at least RELAY_MIN_TTL_MS ({RELAY_MIN_TTL_MS})"
    )

# Quotas per plan (docs/api.md): RELAY_QUOTA_<PLAN>_<QUOTA>, e.g. RELAY_QUOTA_FREE_SENDS_PER_DAY.
# Over one: 429 quota_exceeded with Retry-After (SMTP: 552 5.2.2 for a full mailbox).
QUOTA_DEFAULTS = {
    "free": {"active_mailboxes": 10, "sends_per_day": 20, "recipients_per_send": 5,
             "stored_bytes_per_mailbox": 25 * 1024 * 1024},
    "pro": {"active_mailboxes": 1_000, "sends_per_day": 1_000, "recipients_per_send": 50,
            "stored_bytes_per_mailbox": 250 * 1024 * 1024},
    "enterprise": {"active_mailboxes": 100_000, "sends_per_day": 20_000, "recipients_per_send": 50,
                   "stored_bytes_per_mailbox": 1024 * 1024 * 1024},
}
RELAY_QUOTAS = {
    plan: {name: _int(f"RELAY_QUOTA_{plan.upper()}_{name.upper()}", default) for name, default in quotas.items()}
    for plan, quotas in QUOTA_DEFAULTS.items()
}

RELAY_SWEEP_INTERVAL_SECONDS = _int("RELAY_SWEEP_INTERVAL_SECONDS", 5, minimum=1)
RELAY_SWEEP_BATCH_SIZE = _int("RELAY_SWEEP_BATCH_SIZE", 500, minimum=1)
# Batches of each kind (due, lapsed, abandoned) one sweep takes before it leaves the rest
# to the next: at most 10 × 500 expire tasks published per sweep.
RELAY_SWEEP_MAX_BATCHES = _int("RELAY_SWEEP_MAX_BATCHES", 10, minimum=1)
RELAY_CLEANUP_MAX_RETRIES = _int("RELAY_CLEANUP_MAX_RETRIES", 3)
RELAY_CLEANUP_RETRY_BACKOFF_SECONDS = _int("RELAY_CLEANUP_RETRY_BACKOFF_SECONDS", 30, minimum=1)
RELAY_CLEANUP_LEASE_SECONDS = _int("RELAY_CLEANUP_LEASE_SECONDS", 120, minimum=4)
RELAY_RETENTION_DAYS = _int("RELAY_RETENTION_DAYS", 7, minimum=1)
# Queue each expire task to run at its mailbox's expires_at when the mailbox falls due
# before the next sweeps, instead of waiting for the sweep after it (see docs/benchmarks.md).
RELAY_EXPIRY_SCHEDULE_AHEAD = _bool("RELAY_EXPIRY_SCHEDULE_AHEAD", True)
# The longest a retry waits: Celery's retry_backoff_max. Retries past it stop doubling.
RELAY_CLEANUP_RETRY_BACKOFF_MAX_SECONDS = 600

RELAY_BACKEND = _choice("RELAY_BACKEND", "local", ("local", "stalwart", "cyrus"))
# For trying the operator's side locally: with the local backend, the cleanup of a
# mailbox whose local part starts with this prefix fails for good, so it becomes a dead
# letter (README, "Operator quick start"). Empty: off.
RELAY_LOCAL_FAIL_CLEANUP_PREFIX = env.str("RELAY_LOCAL_FAIL_CLEANUP_PREFIX", default="").strip().lower()
STALWART_URL = env.str("STALWART_URL", default="").rstrip("/")
STALWART_TOKEN = env.str("STALWART_TOKEN", default="")
if RELAY_BACKEND == "stalwart" and not (STALWART_URL and STALWART_TOKEN):
    raise ImproperlyConfigured("STALWART_URL and STALWART_TOKEN must be set when RELAY_BACKEND is stalwart")
if STALWART_URL and not STALWART_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured(f"STALWART_URL must be an http(s) URL, got {STALWART_URL!r}")
# (connect, read) seconds for every call to Stalwart.
STALWART_TIMEOUT = (_int("STALWART_CONNECT_TIMEOUT_SECONDS", 3, minimum=1), _int("STALWART_READ_TIMEOUT_SECONDS", 10, minimum=1))

# Cyrus IMAP as the backend (docs/configuration.md): the admin's IMAP for accounts, its
# JMAP for the mail. Relay signs in as the admin only.
CYRUS_IMAP_URL = env.str("CYRUS_IMAP_URL", default="").strip()
CYRUS_JMAP_URL = env.str("CYRUS_JMAP_URL", default="").strip().rstrip("/")
CYRUS_ADMIN_USER = env.str("CYRUS_ADMIN_USER", default="").strip()
CYRUS_ADMIN_PASSWORD = env.str("CYRUS_ADMIN_PASSWORD", default="")
if RELAY_BACKEND == "cyrus":
    _missing = [name for name, value in (("CYRUS_IMAP_URL", CYRUS_IMAP_URL), ("CYRUS_JMAP_URL", CYRUS_JMAP_URL),
                                         ("CYRUS_ADMIN_USER", CYRUS_ADMIN_USER),
                                         ("CYRUS_ADMIN_PASSWORD", CYRUS_ADMIN_PASSWORD)) if not value]
    if _missing:
        raise ImproperlyConfigured(f"{', '.join(_missing)} must be set when RELAY_BACKEND is cyrus")
if RELAY_BACKEND in ("cyrus", "stalwart") and not RELAY_AUTHSERV_ID:
    raise ImproperlyConfigured(f"RELAY_AUTHSERV_ID must be set when RELAY_BACKEND is {RELAY_BACKEND}: the authserv-id "
                               "your mail server writes in its Authentication-Results (and strips from mail it "
                               "receives), e.g. its host name")
if CYRUS_IMAP_URL and not CYRUS_IMAP_URL.startswith(("imap://", "imaps://")):
    raise ImproperlyConfigured(f"CYRUS_IMAP_URL must be imap://host:port or imaps://host:port, got {CYRUS_IMAP_URL!r}")
if CYRUS_JMAP_URL and not CYRUS_JMAP_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured(f"CYRUS_JMAP_URL must be an http(s) URL, got {CYRUS_JMAP_URL!r}")
# Seconds for each step of a call to Cyrus (connect, sign in, one command or request).
CYRUS_TIMEOUT_SECONDS = _int("CYRUS_TIMEOUT_SECONDS", 5, minimum=1)
# How often the mail reader asks the mail server what changed (beat; docs/architecture.md,
# "Mail read from the mail server"). With Cyrus one IMAP command covers every account.
RELAY_MAILSERVER_POLL_SECONDS = _int("RELAY_MAILSERVER_POLL_SECONDS", 1, minimum=1)

RELAY_SMTP_HOST = env.str("RELAY_SMTP_HOST", default="127.0.0.1")
RELAY_SMTP_PORT = _int("RELAY_SMTP_PORT", 2525, minimum=0)
if RELAY_SMTP_PORT > 65535:
    raise ImproperlyConfigured(f"RELAY_SMTP_PORT must be a port number, got {RELAY_SMTP_PORT}")
# The sandboxes' submission port (docs/sandbox.md), served by the same SMTP process; 0: none.
RELAY_SUBMISSION_PORT = _int("RELAY_SUBMISSION_PORT", 0, minimum=0)
if RELAY_SUBMISSION_PORT > 65535:
    raise ImproperlyConfigured(f"RELAY_SUBMISSION_PORT must be a port number, got {RELAY_SUBMISSION_PORT}")
RELAY_MAX_MESSAGE_BYTES = _int("RELAY_MAX_MESSAGE_BYTES", 10_485_760, minimum=1024)
# Bodies above this are refused with 413 (too_large) before any parsing: room for a send
# whose attachments, base64 in JSON (4 bytes for 3), fill RELAY_MAX_MESSAGE_BYTES.
DATA_UPLOAD_MAX_MEMORY_SIZE = max(2 * 1024 * 1024, RELAY_MAX_MESSAGE_BYTES * 4 // 3 + 1024 * 1024)
RELAY_SMTP_MAX_RECIPIENTS = _int("RELAY_SMTP_MAX_RECIPIENTS", 50, minimum=1)
RELAY_SMTP_SESSION_SECONDS = _int("RELAY_SMTP_SESSION_SECONDS", 300, minimum=1)
RELAY_SMTP_IDLE_SECONDS = _int("RELAY_SMTP_IDLE_SECONDS", 60, minimum=1)
# Storing one message may take this long (a PostgreSQL statement timeout); past it the
# transaction is rolled back and the client told 451, so nothing is stored twice.
RELAY_SMTP_STORE_SECONDS = _int("RELAY_SMTP_STORE_SECONDS", 30, minimum=1)
RELAY_SMTP_MAX_CONNECTIONS = _int("RELAY_SMTP_MAX_CONNECTIONS", 200, minimum=1)
# Per client address (an IPv6 /64 counts as one address): low enough that a few slow
# clients cannot hold every slot.
RELAY_SMTP_MAX_CONNECTIONS_PER_CLIENT = _int("RELAY_SMTP_MAX_CONNECTIONS_PER_CLIENT", 10, minimum=1)
# STARTTLS (RFC 3207) is offered when both are set: a PEM certificate chain and its key.
RELAY_SMTP_TLS_CERT = env.str("RELAY_SMTP_TLS_CERT", default="").strip()
RELAY_SMTP_TLS_KEY = env.str("RELAY_SMTP_TLS_KEY", default="").strip()
if bool(RELAY_SMTP_TLS_CERT) != bool(RELAY_SMTP_TLS_KEY):
    raise ImproperlyConfigured("RELAY_SMTP_TLS_CERT and RELAY_SMTP_TLS_KEY must be set together (or neither)")
for _name, _path in (("RELAY_SMTP_TLS_CERT", RELAY_SMTP_TLS_CERT), ("RELAY_SMTP_TLS_KEY", RELAY_SMTP_TLS_KEY)):
    if _path and not os.access(_path, os.R_OK):
        raise ImproperlyConfigured(f"{_name} names {_path!r}, which is not a readable file")

# Outbound mail for POST /mailboxes/{id}/messages.
try:
    _email = env.email_url("EMAIL_URL", default="consolemail://")
except (ImproperlyConfigured, ValueError, KeyError) as exc:
    raise ImproperlyConfigured(f"EMAIL_URL is not a usable email URL: {exc}") from None
EMAIL_BACKEND = _email["EMAIL_BACKEND"]
EMAIL_HOST = _email.get("EMAIL_HOST", "localhost")
EMAIL_PORT = _email.get("EMAIL_PORT", 25)
EMAIL_HOST_USER = _email.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = _email.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = _email.get("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = _email.get("EMAIL_USE_SSL", False)
EMAIL_FILE_PATH = _email.get("EMAIL_FILE_PATH")
EMAIL_TIMEOUT = 10
RELAY_SEND_MAX_RETRIES = _int("RELAY_SEND_MAX_RETRIES", 3)
RELAY_SEND_RETRY_BACKOFF_SECONDS = _int("RELAY_SEND_RETRY_BACKOFF_SECONDS", 30, minimum=1)
# The From of the mails Relay sends for itself (activation, recovery).
DEFAULT_FROM_EMAIL = env.str("RELAY_MAIL_FROM", default=f"Relay <noreply@{RELAY_DOMAINS[0]}>")
# A sent message's envelope sender (its Return-Path) is RELAY_BOUNCE_LOCAL_PART+<tag>@<the
# sending domain>: bounces and complaints come back to it (docs/delivery.md).
RELAY_BOUNCE_LOCAL_PART = env.str("RELAY_BOUNCE_LOCAL_PART", default="bounces").strip().lower()
if not re.fullmatch(r"[-a-z0-9_]{1,32}", RELAY_BOUNCE_LOCAL_PART):
    raise ImproperlyConfigured("RELAY_BOUNCE_LOCAL_PART must be 1 to 32 of a-z, 0-9, _ and -, got "
                               f"{RELAY_BOUNCE_LOCAL_PART!r}")

# --- Calls to the mail backend, from all workers together (docs/architecture.md; relay/backends/limiter.py) ----
RELAY_BACKEND_MAX_PER_MINUTE = _int("RELAY_BACKEND_MAX_PER_MINUTE", 1000, minimum=1)
RELAY_BACKEND_MAX_CONCURRENT = _int("RELAY_BACKEND_MAX_CONCURRENT", 4, minimum=1)
# How long a call may wait for a slot before its task steps aside (a cleanup comes back
# later, unattempted), and how long a slot a killed worker held stays taken.
RELAY_BACKEND_SLOT_WAIT_SECONDS = _int("RELAY_BACKEND_SLOT_WAIT_SECONDS", 2)
RELAY_BACKEND_SLOT_HOLD_SECONDS = _int("RELAY_BACKEND_SLOT_HOLD_SECONDS", 60, minimum=1)

# --- Health and metrics (docs/architecture.md; api/health.py, api/metrics.py) --------------------------
# prometheus_client's multiprocess mode: every process of one host writes its counters to
# files in this directory and /metrics sums them. Empty it when the host's processes
# start (run.sh does; docker-compose mounts a tmpfs). Unset: each process counts alone.
PROMETHEUS_MULTIPROC_DIR = env.str("PROMETHEUS_MULTIPROC_DIR", default="")
if PROMETHEUS_MULTIPROC_DIR and not os.path.isdir(PROMETHEUS_MULTIPROC_DIR):
    raise ImproperlyConfigured(
        f"PROMETHEUS_MULTIPROC_DIR={PROMETHEUS_MULTIPROC_DIR!r} is not a directory; create it before starting Relay")
# The gauges read from the database (and the admin's first screen) are this many seconds
# old at most: one scrape in that time pays for the counts, the rest read the cache.
RELAY_METRICS_CACHE_SECONDS = _int("RELAY_METRICS_CACHE_SECONDS", 15)
# When set, /metrics wants "Authorization: Bearer <this>" (Prometheus' bearer_token).
RELAY_METRICS_TOKEN = env.str("RELAY_METRICS_TOKEN", default="")

# --- Webhooks (docs/api.md) ------------------------------------------------------------------
RELAY_WEBHOOK_TIMEOUT_SECONDS = _int("RELAY_WEBHOOK_TIMEOUT_SECONDS", 10, minimum=1)
# How long a delivery's run holds it: one call's deadline twice over, and a margin.
RELAY_WEBHOOK_RUN_LEASE_SECONDS = RELAY_WEBHOOK_TIMEOUT_SECONDS * 2 + 30
# Webhooks one account may have: each inbound mail makes a delivery per webhook, so
# without a cap one account could point Relay at a third party many times over.
RELAY_MAX_WEBHOOKS = _int("RELAY_MAX_WEBHOOKS", 10, minimum=1)
RELAY_WEBHOOK_ALLOW_PRIVATE = _bool("RELAY_WEBHOOK_ALLOW_PRIVATE", False)
# Certificate authorities (a PEM file) that webhook receivers and agents' client ID
# documents are checked against, besides the usual ones (certifi's); empty: those alone.
RELAY_WEBHOOK_CA_FILE = env.str("RELAY_WEBHOOK_CA_FILE", default="")
if RELAY_WEBHOOK_CA_FILE and not Path(RELAY_WEBHOOK_CA_FILE).is_file():
    raise ImproperlyConfigured(f"RELAY_WEBHOOK_CA_FILE names no file: {RELAY_WEBHOOK_CA_FILE!r}")
RELAY_WEBHOOK_MAX_RETRIES = _int("RELAY_WEBHOOK_MAX_RETRIES", 3)
RELAY_WEBHOOK_RETRY_BACKOFF_SECONDS = _int("RELAY_WEBHOOK_RETRY_BACKOFF_SECONDS", 30, minimum=1)
RELAY_WEBHOOK_RETRY_BACKOFF_MAX_SECONDS = _int("RELAY_WEBHOOK_RETRY_BACKOFF_MAX_SECONDS", 600, minimum=1)
# How long a queued delivery is trusted to its task before the sweep queues it again.
RELAY_WEBHOOK_LEASE_SECONDS = _int("RELAY_WEBHOOK_LEASE_SECONDS", 60, minimum=1)

# --- Message checks (docs/checks.md) ------------------------------------------------------------
# SpamAssassin's spamd, spamd://host:port; unset, the spam check answers 404 not_configured.
RELAY_SPAMD_URL = env.str("RELAY_SPAMD_URL", default="").strip()
if RELAY_SPAMD_URL:
    _spamd = urlsplit(RELAY_SPAMD_URL)
    try:
        _spamd_port = _spamd.port
    except ValueError:
        _spamd_port = None
    if _spamd.scheme != "spamd" or not _spamd.hostname or (_spamd_port is None and ":" in _spamd.netloc):
        raise ImproperlyConfigured(f"RELAY_SPAMD_URL must be spamd://host:port, got {RELAY_SPAMD_URL!r}")
RELAY_SPAMD_TIMEOUT_SECONDS = _int("RELAY_SPAMD_TIMEOUT_SECONDS", 10, minimum=1)
# Each link of a link check: all its requests and redirects within this; a few links at once.
RELAY_LINK_CHECK_TIMEOUT_SECONDS = _int("RELAY_LINK_CHECK_TIMEOUT_SECONDS", 10, minimum=1)
RELAY_LINK_CHECK_CONCURRENCY = _int("RELAY_LINK_CHECK_CONCURRENCY", 5, minimum=1)
# Links to loopback, private and link-local addresses are refused unless this is set (tests,
# or a staging Relay behind a firewall checking its own site).
RELAY_LINK_CHECK_ALLOW_PRIVATE = _bool("RELAY_LINK_CHECK_ALLOW_PRIVATE", False)
# Per account (a mailbox without an owner alone), in every web process together
# (checks/bounds.py): a spam check holds spamd, a link check sends up to hundreds of requests.
RELAY_SPAM_CHECKS_AT_ONCE = _int("RELAY_SPAM_CHECKS_AT_ONCE", 2, minimum=1)
RELAY_SPAM_CHECKS_PER_MINUTE = _int("RELAY_SPAM_CHECKS_PER_MINUTE", 20, minimum=1)
RELAY_LINK_CHECKS_AT_ONCE = _int("RELAY_LINK_CHECKS_AT_ONCE", 2, minimum=1)
RELAY_LINK_CHECKS_PER_MINUTE = _int("RELAY_LINK_CHECKS_PER_MINUTE", 5, minimum=1)
# Threads of a web process for each kind of call that waits on a server someone else
# chose (core/pools.py): spamd's checks, agents' client ID documents. A call past them
# is 503 with Retry-After, so that neither kind holds the threads every route shares.
RELAY_SPAMD_THREADS = _int("RELAY_SPAMD_THREADS", 4, minimum=1)
RELAY_CLIENT_DOCUMENT_THREADS = _int("RELAY_CLIENT_DOCUMENT_THREADS", 4, minimum=1)

# --- Accounts and the mailer (docs/api.md) -------------------------------------------------
RELAY_PUBLIC_URL = env.str("RELAY_PUBLIC_URL", default="http://127.0.0.1:8000").rstrip("/")
if not RELAY_PUBLIC_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured(f"RELAY_PUBLIC_URL must start with http:// or https://, got {RELAY_PUBLIC_URL!r}")
# Web pages of other origins whose browsers may call /mcp (a hosted agent's own page), each
# a serialized origin: scheme, host and optional port, nothing else.
RELAY_MCP_ALLOWED_ORIGINS = [origin.strip().rstrip("/") for origin in env.list("RELAY_MCP_ALLOWED_ORIGINS",
                                                                               default=[]) if origin.strip()]
for _allowed in RELAY_MCP_ALLOWED_ORIGINS:
    _parts = urlsplit(_allowed)
    if (_parts.scheme not in ("http", "https") or not _parts.hostname or _parts.path or _parts.query
            or "@" in _parts.netloc):
        raise ImproperlyConfigured(f"RELAY_MCP_ALLOWED_ORIGINS must list origins such as https://agent.example:8443, "
                                   f"got {_allowed!r}")
RELAY_TOKEN_TTL_SECONDS = _int("RELAY_TOKEN_TTL_SECONDS", 900, minimum=60)

# --- OAuth for hosted agents (docs/agents.md, "Connecting by URL") -------------------------
RELAY_OAUTH_ACCESS_SECONDS = _int("RELAY_OAUTH_ACCESS_SECONDS", 3600, minimum=60)
# The two audiences a token may be bound to (RFC 8707): the MCP endpoint and the API.
# The host a sandbox's SMTP settings name (docs/sandbox.md): the public URL's host unless set.
RELAY_SMTP_PUBLIC_HOST = env.str("RELAY_SMTP_PUBLIC_HOST", default="").strip() or urlsplit(RELAY_PUBLIC_URL).hostname
if not RELAY_SMTP_PUBLIC_HOST or any(char in RELAY_SMTP_PUBLIC_HOST for char in " /@"):
    raise ImproperlyConfigured(f"RELAY_SMTP_PUBLIC_HOST must be a host name or address, got {RELAY_SMTP_PUBLIC_HOST!r}")
RELAY_MCP_RESOURCE = RELAY_PUBLIC_URL + "/mcp"
RELAY_API_RESOURCE = RELAY_PUBLIC_URL + "/api/v1"
# http redirect URIs stay allowed for native agents' loopback callbacks (RFC 8252); a
# registration or its update may use http for a loopback host only (api.oauth.client_metadata_problem).
SILENCED_SYSTEM_CHECKS = ["oauth2_provider.W008"]
# The consent page is the web inbox's: whoever is not signed in signs in there first.
LOGIN_URL = "/inbox/sign-in"
OAUTH2_PROVIDER = {
    "SCOPES": {"mailboxes": "create, renew, delete and organise your mailboxes",
               "mail:read": "read your mailboxes' mail, wait for it, and check it",
               "mail:send": "send, reply, forward and release from your mailboxes",
               "domains": "add, verify and remove your domains"},
    "DEFAULT_SCOPES": ["mailboxes", "mail:read"],
    "ACCESS_TOKEN_EXPIRE_SECONDS": RELAY_OAUTH_ACCESS_SECONDS,
    "REFRESH_TOKEN_EXPIRE_SECONDS": 30 * 24 * 3600,
    "AUTHORIZATION_CODE_EXPIRE_SECONDS": 60,
    "ROTATE_REFRESH_TOKEN": True,
    "REFRESH_TOKEN_REUSE_PROTECTION": True,
    "PKCE_REQUIRED": True,
    "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,  # S256 only
    "COMPLIANT_BCP_RFC9700_IMPLICIT_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PASSWORD_GRANT": True,
    "COMPLIANT_BCP_RFC9700_ACCESS_TOKEN_TRANSPORT": True,  # the header only
    "COMPLIANT_BCP_RFC9700_TOKEN_STORAGE": True,  # tokens stored hashed
    "COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS": True,
    "ALLOWED_REDIRECT_URI_SCHEMES": ["http", "https"],
    "OAUTH2_RESPONSE_TYPES_SUPPORTED": ["code"],
    "OAUTH2_GRANT_TYPES_SUPPORTED": ["authorization_code", "refresh_token"],
    "OAUTH2_TOKEN_ENDPOINT_AUTH_METHODS_SUPPORTED": ["none", "client_secret_post", "client_secret_basic"],
    "OIDC_ISS_ENDPOINT": RELAY_PUBLIC_URL,
    "OAUTH2_PROTECTED_RESOURCE_IDENTIFIER": RELAY_MCP_RESOURCE,
    "OAUTH2_PROTECTED_RESOURCE_AUTHORIZATION_SERVERS": [RELAY_PUBLIC_URL],
    "OAUTH2_PROTECTED_RESOURCE_NAME": "Relay",
    "DCR_ENABLED": True,
    "DCR_REGISTRATION_PERMISSION_CLASSES": ("api.oauth.RegistrationAllowed",),
    "CIMD_ENABLED": True,
    "CIMD_METADATA_FETCHER": "api.oauth.ClientDocumentFetcher",
    "CIMD_FETCH_TIMEOUT_SECONDS": 5,
    "CIMD_MAX_DOCUMENT_SIZE": 16 * 1024,
    # The toolkit's own cap on fetches at once, the same as the threads that run them.
    "CIMD_MAX_CONCURRENT_FETCHES": RELAY_CLIENT_DOCUMENT_THREADS,
}


def _signing_keys() -> list[bytes]:
    """RELAY_TOKEN_SIGNING_KEYS: 64-hex-digit keys, the first signs and all verify. By
    default one key derived from the secret key, so rotating that rotates this too."""
    raw = env.str("RELAY_TOKEN_SIGNING_KEYS", default="").strip()
    if not raw:
        return [hashlib.sha256(b"relay token signing key:" + SECRET_KEY.encode()).digest()]
    keys = []
    for item in (part.strip() for part in raw.split(",")):
        try:
            if len(item) != 64:
                raise ValueError
            keys.append(bytes.fromhex(item))
        except ValueError:
            raise ImproperlyConfigured(
                f"RELAY_TOKEN_SIGNING_KEYS must be a comma list of 64-hex-digit keys (python3 -c "
                f"'import secrets; print(secrets.token_hex(32))'), got {item[:8]!r}…") from None
    return keys


RELAY_TOKEN_SIGNING_KEYS = _signing_keys()
RELAY_MAILER_BATCH_LIMIT = _int("RELAY_MAILER_BATCH_LIMIT", 50, minimum=1)
RELAY_MAILER_BATCH_TIMEOUT_MS = _int("RELAY_MAILER_BATCH_TIMEOUT_MS", 1000, minimum=1)
RELAY_MAILER_MAX_PER_SECOND = _int("RELAY_MAILER_MAX_PER_SECOND", 0)
# How long a claimed batch is trusted to its worker (sending, and waiting out retries)
# before any mailer claims it again.
RELAY_MAILER_LEASE_SECONDS = _int("RELAY_MAILER_LEASE_SECONDS", 300, minimum=1)
# A retry must come before the batch's lease lapses, or a mailer would claim the batch
# again meanwhile (harmless: the outcome is a compare-and-set on the claim).
RELAY_SEND_RETRY_BACKOFF_MAX_SECONDS = max(1, RELAY_MAILER_LEASE_SECONDS // 2)

# --- Celery ----------------------------------------------------------------------------
CELERY_BROKER_URL = _broker_url
if CELERY_BROKER_URL.startswith("filesystem://"):
    # The server-less broker of `make run`: messages are files under var/broker/.
    # The folders are made by scripts/run.sh (settings create nothing at import).
    _broker_dir = VAR_DIR / "broker"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "control_folder": str(_broker_dir / "control"),
    }
elif CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        # With acks_late a task stays unacknowledged in Redis until it finishes; if no
        # worker acks it within visibility_timeout, Redis hands it out again. Tasks held
        # for a countdown (retries: at most RELAY_CLEANUP_RETRY_BACKOFF_MAX_SECONDS) are
        # unacked all that time, so the timeout must be longer, or every retry would be
        # duplicated. A task lost with a dead worker is not waited for: the sweep
        # re-enqueues it from the database after its lease (RELAY_CLEANUP_LEASE_SECONDS).
        "visibility_timeout": 3600,
        "socket_timeout": 10,
        "socket_connect_timeout": 5,
    }
elif CELERY_BROKER_URL.startswith(("amqp://", "amqps://", "pyamqp://")):
    # RabbitMQ: the queues below are durable (kombu's default), and a publish waits for
    # the broker's confirm, so a task said to be queued is on disk. acks_late holds a
    # message unacknowledged while it runs or waits for its countdown (at most
    # RELAY_CLEANUP_RETRY_BACKOFF_MAX_SECONDS); RabbitMQ's consumer_timeout (30 minutes
    # by default) must stay above that.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"confirm_publish": True}
    CELERY_BROKER_CONNECTION_TIMEOUT = 5
else:
    raise ImproperlyConfigured(
        f"CELERY_BROKER_URL must be filesystem://, redis://... or amqp://..., got {CELERY_BROKER_URL!r}")
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Publish through the default ("") exchange, which names the queue directly. Through a
# named exchange, kombu looks up the queue in a binding that Redis keeps as a key: a
# broker restarted without persistence, or flushed, forgets it, and every publish after
# that is dropped in silence until each worker restarts and binds again.
#
# The sweep has a queue of its own: behind a backlog of thousands of expire tasks it
# would wait its turn (and expire), while workers take from both queues in rotation. The
# mail server's poll shares it, for the same reason.
#
# Link checks have a queue of their own too: a check takes up to minutes of requests to
# sites a message names, and no account's checks may delay expiry, the outbox or webhook
# deliveries behind them. A worker started without -Q takes every queue here; the
# processes Relay ships run one worker for `links` alone and the others without it
# (docs/checks.md, "The link-check queue").
CELERY_TASK_QUEUES = [Queue("celery", Exchange(""), routing_key="celery"), Queue("sweep", Exchange(""), routing_key="sweep"),
                      Queue("links", Exchange(""), routing_key="links")]
CELERY_TASK_DEFAULT_QUEUE = "celery"
CELERY_TASK_ROUTES = {name: {"queue": "sweep"} for name in (
    task_names.SWEEP, task_names.PURGE_RETAINED, task_names.RECONCILE_REPORT, task_names.READ_MAIL_SERVER,
    task_names.SWEEP_WEBHOOK_DELIVERIES)} | {task_names.CHECK_LINKS: {"queue": "links"}}
# Relay keeps every outcome in its own tables; Celery results would only pile up.
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
# Acknowledge after the task ran, and give a task back to the queue when the process
# running it dies (kill -9, OOM): a mailbox cleanup is never dropped by a crash.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# With acks_late, each prefetched message is one more a dying worker holds hostage until
# the broker gives it back; one at a time keeps that to the task in hand.
CELERY_WORKER_PREFETCH_MULTIPLIER = _int("CELERY_WORKER_PREFETCH_MULTIPLIER", 1, minimum=1)
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = True
# Celery's Django fixup closes the database connection around every task unless told to
# reuse it, and reconnecting is a large share of a short task (docs/benchmarks.md).
# Reuse it for this many tasks (Django's CONN_MAX_AGE still retires old connections).
CELERY_DB_REUSE_MAX = _int("CELERY_DB_REUSE_MAX", 1000, minimum=0)
# No task may run forever; the expire task sets tighter limits of its own.
CELERY_TASK_SOFT_TIME_LIMIT = 60
CELERY_TASK_TIME_LIMIT = 90
CELERY_BEAT_SCHEDULER = "expiry.beat:ClockSafeScheduler"
CELERY_TIMEZONE = "UTC"
