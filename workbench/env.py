"""Typed readers for settings taken from the environment.

Each helper returns the embedded default when the variable is unset and fails loudly
(ImproperlyConfigured) when it is set to something malformed, so a typo in production
never silently turns into a default.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use 1/0, true/false)")


def _env_number(name: str, default, parse, kind: str, minimum):
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = parse(raw)
    except ValueError as e:
        raise ImproperlyConfigured(f"{name}={raw!r} is not {kind}") from e
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is below the minimum {minimum}")
    return value


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    return _env_number(name, default, int, "an integer", minimum)


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    return _env_number(name, default, float, "a number", minimum)


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def database_from_url(url: str, *, base_dir: Path) -> dict:
    """Django DATABASES entry from `postgres://user:pass@host:port/name` or `sqlite:///path`."""
    parsed = urlparse(url)
    if parsed.scheme == "sqlite":
        path = unquote(parsed.path)
        if not path or path == "/":
            raise ImproperlyConfigured(f"DATABASE_URL={url!r} names no SQLite file")
        # sqlite:///var/db.sqlite3 is relative to the project, sqlite:////abs/db absolute.
        file = Path(path[1:])  # drop the URL's leading slash: four slashes mean absolute
        if not file.is_absolute():
            file = base_dir / file
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(file),
            # The web and worker processes share the file: wait on locks instead of failing.
            "OPTIONS": {
                "timeout": 30,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL;",
            },
        }
    if parsed.scheme in {"postgres", "postgresql", "pgsql"}:
        name = unquote(parsed.path.lstrip("/"))
        if not name:
            raise ImproperlyConfigured(f"DATABASE_URL={url!r} names no database")
        entry = {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name,
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(parsed.port or ""),
            "CONN_MAX_AGE": 60,  # a worker keeps its connection
            "CONN_HEALTH_CHECKS": True,
        }
        if os.environ.get("WORKBENCH_ASGI"):
            # The web server (workbench/asgi.py) runs each request in a thread of its own:
            # a connection kept per thread piled up to "too many clients" at 50 concurrent
            # API clients, and one opened per request cost its setup every time. A pool
            # bounds them (a request waits for a free connection) and keeps them open.
            size = int(os.environ.get("WORKBENCH_DB_POOL", "20"))
            entry.update(
                CONN_MAX_AGE=0,
                CONN_HEALTH_CHECKS=False,
                OPTIONS={"pool": {"min_size": 2, "max_size": max(size, 2), "timeout": 30}},
            )
        return entry
    raise ImproperlyConfigured(
        f"DATABASE_URL={url!r}: unsupported scheme {parsed.scheme!r} (use postgres:// or sqlite:///)"
    )
