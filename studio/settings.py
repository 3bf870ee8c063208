"""Settings for Environment Studio, read from the environment with working local defaults."""
import hashlib
import ipaddress
import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def envstr(name: str, default: str) -> str:
    return os.environ.get(name, default)


def envbool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off", ""):
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, got {value!r}")


def envint(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from None


def envfloat(name: str, default: float) -> float:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {value!r}") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ImproperlyConfigured(f"{name} must be a finite number, got {value!r}")
    return number


def envchoice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = os.environ.get(name, default)
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def artifact_storage() -> dict:
    """The STORAGES entry for step artifacts (screenshots): files under MEDIA_ROOT, or an S3-compatible
    bucket (ARTIFACT_STORAGE=s3) that workers and web processes on different hosts share.

    Either way the files are served only by the team-checked artifact view (runs/artifacts.py):
    the backend's own url() (a public path, a presigned link) is never handed out."""
    if envchoice("ARTIFACT_STORAGE", "filesystem", ("filesystem", "s3")) == "filesystem":
        return {"BACKEND": "runs.artifacts.FileSystemArtifactStorage"}
    bucket = envstr("S3_BUCKET", "")
    if not bucket:
        raise ImproperlyConfigured("ARTIFACT_STORAGE=s3 needs S3_BUCKET")
    endpoint = envstr("S3_ENDPOINT_URL", "") or None
    if endpoint and not endpoint.startswith(("http://", "https://")):
        raise ImproperlyConfigured(f"S3_ENDPOINT_URL must be an http(s) URL, got {endpoint!r}")
    access_key, secret_key = envstr("S3_ACCESS_KEY_ID", "") or None, envstr("S3_SECRET_ACCESS_KEY", "") or None
    if bool(access_key) != bool(secret_key):
        raise ImproperlyConfigured("S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY go together (or neither, for boto3's own lookup)")
    return {
        "BACKEND": "runs.artifacts.S3ArtifactStorage",
        "OPTIONS": {
            "bucket_name": bucket,
            "endpoint_url": endpoint,
            "access_key": access_key,
            "secret_key": secret_key,
            "region_name": envstr("S3_REGION", "us-east-1"),
            # MinIO and most self-hosted stores answer at one host name: bucket in the path, not the host.
            "addressing_style": "path" if endpoint else None,
            "default_acl": None,
            # Never overwrite, as on the file system: a worker presumed dead and replaced must not put its
            # screenshot over the new attempt's (a taken name gets a suffix; the step row keeps the real one).
            "file_overwrite": False,
        },
    }


def envlist(name: str, default: str) -> list[str]:
    return [item.strip() for item in envstr(name, default).split(",") if item.strip()]


def envnetworks(name: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """A comma-separated list of addresses or networks (10.0.0.0/8, ::1)."""
    networks = []
    for entry in envlist(name, ""):
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ImproperlyConfigured(f"{name}: {entry!r} is not an address or network") from None
    return tuple(networks)


# Off unless the developer asks for it (DEBUG=true: `make run` and the tests set it).
DEBUG = envbool("DEBUG", False)
SECRET_KEY = envstr("SECRET_KEY", "dev-only-insecure-key-change-me-in-production-0123456789")
if not DEBUG and SECRET_KEY.startswith("dev-only"):
    raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off (or set DEBUG=true on a development machine)")
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", "")
SITE_URL = envstr("SITE_URL", "http://127.0.0.1:8000")

# HTTPS settings: on whenever DEBUG is off (`manage.py check --deploy` is clean), each can be turned off
# for a deployment that terminates TLS elsewhere and says so (SECURE_PROXY_SSL_HEADER=X-Forwarded-Proto).
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", not DEBUG)
SESSION_COOKIE_SECURE = envbool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = envbool("CSRF_COOKIE_SECURE", not DEBUG)
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 0 if DEBUG else 31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", not DEBUG)
if envstr("SECURE_PROXY_SSL_HEADER", ""):
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + envstr("SECURE_PROXY_SSL_HEADER", "").upper().replace("-", "_"), "https")
SESSION_COOKIE_HTTPONLY = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy (studio/middleware.py): scripts only from this origin, never inline.
CONTENT_SECURITY_POLICY = envstr(
    "CONTENT_SECURITY_POLICY",
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "connect-src 'self' ws: wss:; font-src 'self' data:; object-src 'none'; base-uri 'self'; "
    "form-action 'self'; frame-ancestors 'none'",
)

# Django's admin at /admin/ (staff only): off unless asked for.
ADMIN_ENABLED = envbool("ADMIN_ENABLED", False)
# This install's secret (studio/install_secret.py): seed secrets and the default model-key encryption
# key derive from it. Unset: a random one kept in the database, made at the first start.
INSTALL_SECRET = envstr("INSTALL_SECRET", "")
if INSTALL_SECRET and len(INSTALL_SECRET) < 32:
    raise ImproperlyConfigured("INSTALL_SECRET must be at least 32 characters (or unset: a random one in the database)")
# Model API keys are stored encrypted (Fernet). The key comes from the environment (a urlsafe base64
# 32-byte Fernet key); without it, a key is derived from the install secret.
MODEL_KEY_ENCRYPTION_KEY = envstr("MODEL_KEY_ENCRYPTION_KEY", "")
# Model agents may reach private, loopback and link-local addresses only when listed here (host names,
# addresses or networks such as 10.1.2.0/24): runs/egress.py.
MODEL_EGRESS_ALLOW = envlist("MODEL_EGRESS_ALLOW", "")

# Login throttling (django-axes): this many failures for a user name from one address locks it out.
AXES_FAILURE_LIMIT = envint("AXES_FAILURE_LIMIT", 10)
AXES_COOLOFF_TIME = envfloat("AXES_COOLOFF_HOURS", 1.0)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# The address counted is the socket's peer (studio/client_address.py), or, when that peer is one of
# these proxies (addresses or networks, e.g. a load balancer's 10.0.0.0/8), the X-Forwarded-For hop
# it names; the header is believed from nobody else.
TRUSTED_PROXIES = envnetworks("TRUSTED_PROXIES")
AXES_CLIENT_IP_CALLABLE = "studio.client_address.client_address"
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "channels",
    "ninja",
    "axes",
    "django.contrib.postgres",
    "studio",
    "environments",
    "runs",
    "runs.protocols",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "studio.middleware.InputGateMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "studio.middleware.ContentSecurityPolicyMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into its lockout answer.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "studio.urls"
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
                "studio.context_processors.team",
            ],
        },
    },
]
WSGI_APPLICATION = None
ASGI_APPLICATION = "studio.asgi.application"

DATABASES = {
    "default": dj_database_url.parse(
        envstr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/studio"),
        conn_max_age=envint("DB_CONN_MAX_AGE", 0),
    )
}
# A process with many threads (web, episode host) shares at most this many connections among them
# (psycopg's pool, through Django); 0: a connection per thread, as Django does by default.
DB_POOL_MAX_SIZE = envint("DB_POOL_MAX_SIZE", 0)
if DB_POOL_MAX_SIZE < 0:
    raise ImproperlyConfigured("DB_POOL_MAX_SIZE must be 0 (no pool) or more")
if DB_POOL_MAX_SIZE:
    if DATABASES["default"]["CONN_MAX_AGE"]:
        raise ImproperlyConfigured("DB_POOL_MAX_SIZE needs DB_CONN_MAX_AGE=0 (the pool keeps the connections)")
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {"min_size": 1, "max_size": DB_POOL_MAX_SIZE, "timeout": 60}
# Celery workers keep their connection across tasks (a rollout takes a handful of round trips; opening a
# connection per task cost as many again), unless a pool keeps it for them. 0: a connection per task.
WORKER_DB_CONN_MAX_AGE = envint("WORKER_DB_CONN_MAX_AGE", 600)
if WORKER_DB_CONN_MAX_AGE < 0:
    raise ImproperlyConfigured("WORKER_DB_CONN_MAX_AGE must be 0 (a connection per task) or more")
if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
    raise ImproperlyConfigured("DATABASE_URL must point at PostgreSQL")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = envstr("REDIS_URL", "redis://127.0.0.1:6379/0")


def deployment_tag(database_name: str, secret_key: str) -> str:
    """A name of this studio for what it shares with others on one Redis: its database's name and its
    SECRET_KEY (the same in every process of one studio), hashed. Redis pub/sub channels are global
    across Redis database numbers, so two studios with one fixed prefix would see each other's events."""
    return "st-" + hashlib.sha256(f"studio-deployment\0{database_name}\0{secret_key}".encode()).hexdigest()[:12]


DEPLOYMENT_TAG = deployment_tag(DATABASES["default"]["NAME"], SECRET_KEY)

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL], "prefix": envstr("CHANNEL_LAYER_PREFIX", DEPLOYMENT_TAG)},
    }
}

CELERY_BROKER_URL = envstr("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Lists live in one Redis database number, but two studios on the same one (REDIS_URL's default)
# would take each other's tasks: the queue is this studio's own unless CELERY_QUEUE names one.
CELERY_TASK_DEFAULT_QUEUE = envstr("CELERY_QUEUE", DEPLOYMENT_TAG)
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": envint("CELERY_VISIBILITY_TIMEOUT", 3600)}
# Redis may restart under a worker: it reconnects for as long as it takes (kombu's transport fixed to
# survive that, studio/redis_broker.py) and lets the rollouts it runs meanwhile go on to their end.
CELERY_BROKER_TRANSPORT = "studio.redis_broker:Transport"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False

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
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"
MEDIA_ROOT = Path(envstr("MEDIA_ROOT", str(BASE_DIR / "media")))
# "default" is the artifacts' storage too: Step.artifact is a FileField, whose storage is the default one.
STORAGES = {
    "default": artifact_storage(),
    "artifacts": artifact_storage(),
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

DATA_UPLOAD_MAX_MEMORY_SIZE = 25 * 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = 25 * 1024 * 1024

# Sandboxes: the interpreter that runs untrusted code (must be readable by the sandbox user).
SANDBOX_PYTHON = envstr("SANDBOX_PYTHON", "/usr/bin/python3")
SANDBOX_BACKEND = envstr("SANDBOX_BACKEND", "process")
if SANDBOX_BACKEND not in ("process", "docker"):
    raise ImproperlyConfigured(f"SANDBOX_BACKEND must be process or docker, got {SANDBOX_BACKEND!r}")
# Start untrusted code in a sandbox that lacks an isolation layer this host refuses (bubblewrap view,
# cgroup, disk quota, uid switch)? Off: such a sandbox is refused and the rollout says which layer.
SANDBOX_ALLOW_WEAK = envbool("SANDBOX_ALLOW_WEAK", False)
# Fair shares: one team runs at most this many worker rollouts at once; the rest wait (parked, sent
# again as the team's rollouts end) while other teams' rollouts take the free worker slots, so one team's
# hung rollouts never hold every slot. "auto" (the default): a worker's concurrency minus one, at least 1
# (with several workers, set a number below their total concurrency). 0: no cap.
TEAM_MAX_RUNNING_ROLLOUTS = envstr("TEAM_MAX_RUNNING_ROLLOUTS", "auto")
if TEAM_MAX_RUNNING_ROLLOUTS != "auto":
    TEAM_MAX_RUNNING_ROLLOUTS = envint("TEAM_MAX_RUNNING_ROLLOUTS", 0)
    if TEAM_MAX_RUNNING_ROLLOUTS < 0:
        raise ImproperlyConfigured("TEAM_MAX_RUNNING_ROLLOUTS must be auto, 0 (no cap) or more")
# What one team may store (environment versions' files, rollouts' steps), in MB: over it, new runs and
# new versions are refused with the reason until the team deletes some. 0: no quota.
TEAM_STORAGE_QUOTA_MB = envint("TEAM_STORAGE_QUOTA_MB", 10240)
if TEAM_STORAGE_QUOTA_MB < 0:
    raise ImproperlyConfigured("TEAM_STORAGE_QUOTA_MB must be 0 (no quota) or more")
# A rollout whose worker stopped beating for this long is picked up again (or errored after 3 tries).
ROLLOUT_STALE_AFTER_S = envint("ROLLOUT_STALE_AFTER_S", 30)
CHROMIUM_PATH = envstr("CHROMIUM_PATH", "/usr/bin/chromium")
# Browser sandboxes each worker process keeps ready with Chromium already started (0: start cold).
BROWSER_POOL_SIZE = envint("BROWSER_POOL_SIZE", 1)

# Dependency environments (docs/dependencies.md): one read-only directory per requirement set, built
# with uv. The index is pip's own configuration unless DEPENV_INDEX_URL names the only one to use.
DEPENV_ROOT = Path(envstr("DEPENV_ROOT", str(BASE_DIR / "var" / "depenvs")))
DEPENV_INDEX_URL = envstr("DEPENV_INDEX_URL", "")
# Folders of wheels searched besides the index (space-separated), e.g. a site's own packages.
DEPENV_FIND_LINKS = envstr("DEPENV_FIND_LINKS", "").split()
DEPENV_BUILD_TIMEOUT_S = envint("DEPENV_BUILD_TIMEOUT_S", 900)
# How many entrypoint checks (a sandbox each, at commit and upload) one team may run at once.
ENTRYPOINT_CHECKS_PER_TEAM = envint("ENTRYPOINT_CHECKS_PER_TEAM", 2)
if DEPENV_BUILD_TIMEOUT_S <= 0:
    raise ImproperlyConfigured(f"DEPENV_BUILD_TIMEOUT_S must be positive, got {DEPENV_BUILD_TIMEOUT_S}")

# Episode hosts hold interactive episodes (play, remote sessions); web processes reach them through Redis.
EPISODE_HOST_REDIS_URL = envstr("EPISODE_HOST_REDIS_URL", REDIS_URL)
EPISODE_HOST_PREFIX = envstr("EPISODE_HOST_PREFIX", DEPLOYMENT_TAG)  # Redis key prefix; see CELERY_TASK_DEFAULT_QUEUE
EPISODES_MAX_OPEN_PER_TEAM = envint("EPISODES_MAX_OPEN_PER_TEAM", 256)
# The direct data plane (runs/episodes/direct.py): each host listens on EPISODE_HOST_BIND:EPISODE_HOST_PORT
# (0: an ephemeral port) and announces EPISODE_HOST_ADVERTISE (default: the bound address) as where web
# processes reach it; a host on another machine binds an address they can reach. Off: Redis lists only.
EPISODE_HOST_DIRECT = envbool("EPISODE_HOST_DIRECT", True)
EPISODE_HOST_BIND = envstr("EPISODE_HOST_BIND", "127.0.0.1")
EPISODE_HOST_PORT = envint("EPISODE_HOST_PORT", 0)
EPISODE_HOST_ADVERTISE = envstr("EPISODE_HOST_ADVERTISE", "")
# Open episodes are admitted by the memory their versions declare (runs/episodes/memory.py), in MB;
# 0: 3/4 of this machine's memory per episode host, half of that per team.
EPISODE_HOST_MEMORY_MB = envint("EPISODE_HOST_MEMORY_MB", 0)
EPISODES_TEAM_MEMORY_MB = envint("EPISODES_TEAM_MEMORY_MB", 0)
EPISODE_STEP_WAIT_S = envint("EPISODE_STEP_WAIT_S", 300)
SESSION_IDLE_TIMEOUT_S = envfloat("SESSION_IDLE_TIMEOUT_S", 300)
# Remote episodes through one credential and version join one session run until none has been open for this long.
SESSION_RUN_IDLE_S = envfloat("SESSION_RUN_IDLE_S", 1800)
PLAY_IDLE_TIMEOUT_S = envfloat("PLAY_IDLE_TIMEOUT_S", 900)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
}
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG
