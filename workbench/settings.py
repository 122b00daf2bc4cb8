"""Django settings, read from the environment.

Two profiles share this file. With nothing set, the embedded profile runs on one machine
with no external service: SQLite, a filesystem Celery broker and a SQLite channel layer.
Production sets DATABASE_URL (PostgreSQL), CELERY_BROKER_URL (RabbitMQ) and REDIS_URL
(Channels layer); see README "Configuration".
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from workbench.env import (
    database_from_url,
    env_bool,
    env_float,
    env_int,
    env_list,
    env_str,
)
from workbench.storage_config import storages_setting

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("WORKBENCH_VAR_DIR", str(BASE_DIR / "var"))).resolve()
VAR_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("DJANGO_DEBUG", False)
SECRET_KEY = env_str("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    # Embedded runs keep a generated key in var/ so sessions survive restarts.
    _key_file = VAR_DIR / "secret_key"
    if not _key_file.exists():
        import secrets

        _key_file.write_text(secrets.token_urlsafe(50))
    SECRET_KEY = _key_file.read_text().strip()

ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])

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
    "drf_spectacular_sidecar",
    "channels",
    "workbench",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "workbench.security.SecurityHeadersMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "workbench.limits.LimitMiddleware",
]

ROOT_URLCONF = "workbench.urls"
ASGI_APPLICATION = "workbench.asgi.application"
# Threads per web process that run requests (workbench/asgi_handler.py): requests beyond
# this many at once wait their turn. Keep it below the database pool (WORKBENCH_DB_POOL).
WEB_THREADS = env_int("WORKBENCH_WEB_THREADS", 16, minimum=1)

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "frontend" / "templates"],
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

DATABASES = {
    "default": database_from_url(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'db.sqlite3'}"), base_dir=BASE_DIR
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
# plotly.js is served from the plotly package's own bundle: no CDN, no copy in the repo.
_plotly_dir = Path(importlib.util.find_spec("plotly").submodule_search_locations[0])
STATICFILES_DIRS = [
    BASE_DIR / "frontend" / "static",
    ("plotly", _plotly_dir / "package_data"),
]

MEDIA_ROOT = Path(env_str("WORKBENCH_MEDIA_ROOT", str(VAR_DIR / "media")))
MEDIA_URL = "media/"

# Where uploads and artifacts live: WORKBENCH_STORAGE=local (MEDIA_ROOT) or s3 (a bucket,
# WORKBENCH_S3_*; see README "Object storage"). Checked here: a bad value stops the start.
STORAGES = storages_setting(os.environ)
# S3: downloads answer 302 to a presigned link valid this long, instead of passing through
STORAGE_PRESIGNED_DOWNLOADS = env_bool("WORKBENCH_S3_PRESIGNED_DOWNLOADS", False)
STORAGE_PRESIGN_SECONDS = env_int("WORKBENCH_S3_PRESIGN_SECONDS", 300, minimum=1)
# Workers keep stored files they read (models, input sets) in VAR_DIR/blobs, up to this
BLOB_CACHE_BYTES = env_int("WORKBENCH_BLOB_CACHE_BYTES", 20 << 30, minimum=0)
# ... and the models they prepared (VAR_DIR/prepared), up to this
PREPARED_CACHE_BYTES = env_int("WORKBENCH_PREPARED_CACHE_BYTES", 10 << 30, minimum=0)
# ... and the segments their compiles built (VAR_DIR/builds), up to this
BUILD_CACHE_BYTES = env_int("WORKBENCH_BUILD_CACHE_BYTES", 2 << 30, minimum=0)

# Uploads: the size limit is checked while streaming, before anything is kept.
MAX_UPLOAD_BYTES = env_int("WORKBENCH_MAX_UPLOAD_BYTES", 1 << 30, minimum=1)
FILE_UPLOAD_HANDLERS = [
    "workbench.uploads.SizeLimitUploadHandler",
    "django.core.files.uploadhandler.MemoryFileUploadHandler",
    "django.core.files.uploadhandler.TemporaryFileUploadHandler",
]
FILE_UPLOAD_MAX_MEMORY_SIZE = 4 << 20  # larger uploads stream to a temporary file
DATA_UPLOAD_MAX_MEMORY_SIZE = 4 << 20

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "workbench.authentication.ExpiringTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": [
        "workbench.api.parsers.SafeJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_FILTER_BACKENDS": [
        "workbench.api.filters.QueryFilter",
        "workbench.api.filters.StrictOrderingFilter",
    ],
    "DEFAULT_PAGINATION_CLASS": "workbench.api.pagination.StrictLimitOffsetPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "workbench.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

# The OpenAPI schema (/api/v1/schema/) and its docs page (/api/v1/docs/). Both are public:
# they describe the code's routes, the same for every account, and a client needs the schema
# before it has a token. Swagger UI is served from the sidecar package: no CDN.
SPECTACULAR_SETTINGS = {
    "TITLE": "Model-optimization workbench API",
    "VERSION": "1",
    "DESCRIPTION": (
        "Upload ONNX models, start runs of the analysis and optimization stages on a "
        "target, read their results and download their artifacts.\n\n"
        "**Authentication**: send `Authorization: Token <key>` with every request. "
        '`POST /api/v1/auth/token/` with `{"username", "password"}` returns the '
        "account's key (it expires; see `expires_at`); a signed-in browser session works "
        "too.\n\n"
        "**Errors**: every 4xx answer has the body "
        '`{"error": {"code": "...", "message": "...", "detail": ...}}`: `code` is stable '
        "and machine-readable, `message` says what to do, and `detail` (present only when "
        "there is more to say) maps each invalid field to its problem. A 429 carries "
        "`Retry-After`.\n\n"
        "**Lists** are paginated with `limit` and `offset`, ordered with "
        "`ordering=field,-other`, and filtered by the parameters each one lists; an "
        "unknown parameter, ordering field or malformed value is a 400."
    ),
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_AUTHENTICATION": [],
    "COMPONENT_SPLIT_REQUEST": True,
    # JSON bodies are documented as JSON only (the form parsers serve the browsable API);
    # the uploads name their multipart body themselves
    "PARSER_WHITELIST": ["workbench.api.parsers.SafeJSONParser"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # no online validator badge: nothing on the page loads from elsewhere
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
    "ENUM_NAME_OVERRIDES": {
        "TargetKindEnum": "workbench.models.Target.Kind",
        "ArtifactKindEnum": "workbench.models.Artifact.Kind",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "workbench.api.schema.add_implied_errors",
    ],
}

# Celery: RabbitMQ in production; a filesystem queue under var/ when embedded.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    _broker_dir = VAR_DIR / "broker"
    for _sub in ("queue", "processed", "control"):
        (_broker_dir / _sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        # Exchange bindings; kombu's default is a folder in the current directory.
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
CELERY_TASK_DEFAULT_QUEUE = env_str("WORKBENCH_QUEUE", "workbench")
# The target names this worker serves (workbench/queues.py); none: every target but other
# machines' measured ones. `celery -A jobs worker --targets a,b` says the same.
WORKER_TARGETS = env_list("WORKBENCH_WORKER_TARGETS", [])
CELERY_TASK_ALWAYS_EAGER = False

# Channels: Redis in production; a SQLite file shared by the web and worker processes
# when embedded (the in-memory layer cannot cross processes).
REDIS_URL = env_str("REDIS_URL", "")
# Tuning candidates built on other workers return through a result store (jobs.builds).
if env_str("WORKBENCH_RESULT_BACKEND", REDIS_URL):
    CELERY_RESULT_BACKEND = env_str("WORKBENCH_RESULT_BACKEND", REDIS_URL)
DISTRIBUTED_BUILDS = env_bool("WORKBENCH_DISTRIBUTED_BUILDS", True)
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                # redis-py 8 reads with a 5 s socket timeout by default, the same 5 s that
                # channels_redis blocks in BZPOPMIN waiting for a message: the read raced the
                # server's empty reply and a quiet websocket died with TimeoutError.
                "hosts": [{"address": REDIS_URL, "socket_timeout": 30}],
                "prefix": env_str("WORKBENCH_CHANNEL_PREFIX", "workbench"),
            },
        }
    }
else:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "workbench.channel_layers.SQLiteChannelLayer",
            "CONFIG": {"path": str(VAR_DIR / "channels.sqlite3")},
        }
    }

# Run supervision: a stage's worker writes a heartbeat; a stage whose heartbeat is older
# than RUN_STALE_SECONDS is marked failed (worker lost).
RUN_HEARTBEAT_SECONDS = env_float("WORKBENCH_HEARTBEAT_SECONDS", 5.0, minimum=0.1)
RUN_STALE_SECONDS = env_float("WORKBENCH_STALE_SECONDS", 60.0, minimum=1.0)
# A cancelled stage stuck in native code is stopped (its pool process ended) after this.
RUN_CANCEL_GRACE_SECONDS = env_float("WORKBENCH_CANCEL_GRACE_SECONDS", 10.0, minimum=0.0)
PROGRESS_MIN_INTERVAL_SECONDS = env_float("WORKBENCH_PROGRESS_INTERVAL", 0.5, minimum=0.0)

# New accounts get the onnx package's bundled models, analyzed, so there is something to see.
SAMPLE_MODELS = env_bool("WORKBENCH_SAMPLE_MODELS", True)

# Analysis limits (passed to the engine).
# Stage time limits, seconds (WORKBENCH_TIME_LIMIT_COMPILE=7200): default, the registry's
STAGE_TIME_LIMITS = {
    _name.removeprefix("WORKBENCH_TIME_LIMIT_").lower(): env_float(_name, 0.0)
    for _name in os.environ
    if _name.startswith("WORKBENCH_TIME_LIMIT_")
}
# A stage whose worker process grows past this is stopped (jobs/progress.py); 0: no limit
STAGE_MEMORY_LIMIT_BYTES = env_int("WORKBENCH_STAGE_MEMORY_BYTES", 0, minimum=0)
# Abuse limits (workbench/limits.py): quotas per account; rates via WORKBENCH_RATE_<SCOPE>.
MAX_ACTIVE_RUNS = env_int("WORKBENCH_MAX_ACTIVE_RUNS", 20, minimum=1)
MAX_STORED_BYTES = env_int("WORKBENCH_MAX_STORED_BYTES", 20 << 30, minimum=1)
SIGNUP_OPEN = env_bool("WORKBENCH_SIGNUP", True)
RATE_NAMESPACE = env_str("WORKBENCH_RATE_NAMESPACE", "")  # tests: counters of their own
TRUST_X_FORWARDED_FOR = env_bool("WORKBENCH_TRUST_X_FORWARDED_FOR", False)
API_TOKEN_DAYS = env_int("WORKBENCH_TOKEN_DAYS", 90, minimum=1)
# A token read from the database is kept in the shared cache this long (workbench.tokens:
# revoking one clears it at once). Off without Redis: a local cache in each process could
# not be cleared by the process that revokes.
API_TOKEN_CACHE_SECONDS = env_int(
    "WORKBENCH_TOKEN_CACHE_SECONDS", 60 if env_str("REDIS_URL", "") else 0, minimum=0
)
# A password-reset link works this long (and once: it dies with the password it resets)
PASSWORD_RESET_TIMEOUT = env_int("WORKBENCH_PASSWORD_RESET_SECONDS", 3600, minimum=60)
# Mail (password resets): an SMTP server when WORKBENCH_EMAIL_HOST names one, else each
# message is a file under VAR_DIR/mail, so the embedded start needs no mail server.
EMAIL_HOST = env_str("WORKBENCH_EMAIL_HOST", "")
if EMAIL_HOST:
    EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    EMAIL_PORT = env_int("WORKBENCH_EMAIL_PORT", 587, minimum=1)
    EMAIL_HOST_USER = env_str("WORKBENCH_EMAIL_USER", "")
    EMAIL_HOST_PASSWORD = env_str("WORKBENCH_EMAIL_PASSWORD", "")
    EMAIL_USE_TLS = env_bool("WORKBENCH_EMAIL_STARTTLS", True)
    EMAIL_USE_SSL = env_bool("WORKBENCH_EMAIL_SSL", False)
    if EMAIL_USE_TLS and EMAIL_USE_SSL:
        raise ImproperlyConfigured(
            "WORKBENCH_EMAIL_STARTTLS and WORKBENCH_EMAIL_SSL are both on: choose one "
            "(SSL for port 465, STARTTLS for 587)"
        )
    EMAIL_TIMEOUT = env_int("WORKBENCH_EMAIL_TIMEOUT_SECONDS", 10, minimum=1)
else:
    EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    EMAIL_FILE_PATH = str(VAR_DIR / "mail")
DEFAULT_FROM_EMAIL = env_str("WORKBENCH_EMAIL_FROM", "workbench@localhost")
if env_str("REDIS_URL", ""):
    # rate-limit counters shared by every web process
    CACHES = {
        "default": {
            # Django's, with one connection pool per process, not one per request
            "BACKEND": "workbench.redis_cache.RedisCache",
            "LOCATION": env_str("REDIS_URL", ""),
            "KEY_PREFIX": "workbench-cache",
        }
    }
MAX_MODEL_NODES = env_int("WORKBENCH_MAX_NODES", 200_000, minimum=1)
MAX_TENSOR_ELEMENTS = env_int("WORKBENCH_MAX_TENSOR_ELEMENTS", 2**31, minimum=1)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("WORKBENCH_LOG_LEVEL", "INFO")},
}

SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
