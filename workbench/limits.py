"""Rate limits and per-user quotas: what a stranger with an account (or without one) can make
the workbench do, and how often.

Rates are sliding windows (see :func:`check`) counted in Django's cache (Redis when ``REDIS_URL`` is set, so every
web process counts together; the embedded profile's one web process uses its local memory).
Each is configurable as ``WORKBENCH_RATE_<SCOPE>=<count>/<seconds>``:

- ``login_failures``: failed sign-ins (web form and token endpoint) per account name and
  address; ``login_failures_ip``: per address whatever the name (credential stuffing);
- ``signup``: accounts created per address; ``token``: token requests per address;
- ``runs``: runs started per user; ``uploads``: models and input sets uploaded per user;
- ``password_reset``: reset mails asked for per address; ``password_reset_email``: per
  mail address asked for, whoever asks (nobody can flood someone's mailbox).

Quotas (``WORKBENCH_MAX_ACTIVE_RUNS``, ``WORKBENCH_MAX_STORED_BYTES``) bound what one user
can have queued or stored at once. A refusal says which limit, when to try again and what to
do; the API answers 429 with ``Retry-After``.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache


@dataclass(frozen=True)
class Rate:
    count: int
    seconds: int

    def describe(self) -> str:
        return f"{self.count} per {_duration(self.seconds)}"


DEFAULT_RATES = {
    "login_failures": Rate(5, 900),
    "login_failures_ip": Rate(30, 900),
    "signup": Rate(5, 3600),
    "token": Rate(20, 60),
    "runs": Rate(60, 3600),
    "uploads": Rate(100, 3600),
    "password_reset": Rate(5, 3600),
    "password_reset_email": Rate(3, 3600),
}
WHAT = {
    "login_failures": "failed sign-ins for this account from this address",
    "login_failures_ip": "failed sign-ins from this address",
    "signup": "accounts created from this address",
    "token": "token requests from this address",
    "runs": "runs started",
    "uploads": "uploads",
    "password_reset": "password resets asked for from this address",
    "password_reset_email": "password resets asked for this mail address",
}


class LimitExceeded(Exception):
    """A rate or a quota was reached; ``message`` says which and what to do."""

    def __init__(self, message: str, *, code: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.retry_after_s = retry_after_s


def limit_status(exc: LimitExceeded) -> int:
    """429 for a rate or the active-run quota (wait and retry), 403 for the storage quota
    (waiting does not help)."""
    return 403 if exc.code == "storage_quota" else 429


class LimitMiddleware:
    """A web page that hits a limit answers with the limit's message (and ``Retry-After``),
    not a 500."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not isinstance(exception, LimitExceeded):
            return None
        from django.shortcuts import render

        response = render(
            request,
            "workbench/limited.html",
            {"message": exception.message},
            status=limit_status(exception),
        )
        if exception.retry_after_s:
            response["Retry-After"] = str(exception.retry_after_s)
        return response


def rate(scope: str) -> Rate:
    raw = os.environ.get(f"WORKBENCH_RATE_{scope.upper()}")
    if raw:
        count, _, seconds = raw.partition("/")
        try:
            return Rate(max(int(count), 0), max(int(seconds), 1))
        except ValueError:
            pass  # a bad setting falls back to the default, never to no limit
    return DEFAULT_RATES[scope]


def _key(scope: str, ident: str, window: int) -> str:
    return f"workbench-rate:{settings.RATE_NAMESPACE}:{scope}:{ident}:{window}"


def _window(r: Rate, now: float) -> tuple[int, float]:
    """The fixed window ``now`` falls in, and how far into it (0..1)."""
    window = int(now // r.seconds)
    return window, now / r.seconds - window


def _counts(scope: str, ident: str, window: int) -> tuple[int, int]:
    keys = [_key(scope, ident, window), _key(scope, ident, window - 1)]
    counts = cache.get_many(keys)
    return int(counts.get(keys[0], 0)), int(counts.get(keys[1], 0))


def check(scope: str, ident: str, now: float | None = None) -> None:
    """Raise :class:`LimitExceeded` when ``ident`` has used up ``scope``'s rate.

    The count is a sliding window: this fixed window's uses plus the previous window's
    weighted by how much of it still lies within the last ``seconds``. (A plain fixed window
    resets at its boundary and lets twice the rate through across it.)"""
    r = rate(scope)
    now = time.time() if now is None else now
    window, into = _window(r, now)
    current, previous = _counts(scope, ident, window)
    if current + previous * (1.0 - into) + 1 <= r.count + 1e-9:
        return
    # When one more use fits: later in this window as the previous window's share decays,
    # or, if this window alone is full, in the next one once this window's share has.
    if r.count == 0:
        free_at = into + 1.0  # turned off: say one window, never "now"
    elif current + 1 <= r.count:
        free_at = (current + previous + 1 - r.count) / previous
    else:
        free_at = 1.0 + (current + 1 - r.count) / current
    # When the estimate itself lets one more through (it weighs a window's uses as spread
    # evenly over it, so this can exceed the window): asking earlier would be refused again.
    left_s = max(1, math.ceil((free_at - into) * r.seconds))
    raise LimitExceeded(
        f"too many {WHAT[scope]}: the limit is {r.describe()}. Try again in {_duration(left_s)}.",
        code="throttled",
        retry_after_s=left_s,
    )


def record(scope: str, ident: str, now: float | None = None) -> None:
    """Count one use of ``scope`` by ``ident``."""
    r = rate(scope)
    now = time.time() if now is None else now
    window, _ = _window(r, now)
    key = _key(scope, ident, window)
    timeout = 2 * r.seconds + 5  # read again as the previous window
    if cache.add(key, 1, timeout=timeout):
        return
    try:
        cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.add(key, 1, timeout=timeout)


def hit(scope: str, ident: str) -> None:
    """:func:`check`, then :func:`record`: for actions counted whether or not they succeed."""
    check(scope, ident)
    record(scope, ident)


def client_address(request) -> str:
    """The address a request came from (the proxy's header only when configured to trust
    it: ``WORKBENCH_TRUST_X_FORWARDED_FOR``)."""
    if getattr(settings, "TRUST_X_FORWARDED_FOR", False):
        forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
        if forwarded:
            return forwarded.split(",")[0].strip()[:64]
    return str(request.META.get("REMOTE_ADDR", "unknown"))[:64]


def check_active_runs(user) -> None:
    """Refuse a new run while the user has ``MAX_ACTIVE_RUNS`` queued or running."""
    from workbench.models import ACTIVE, Run

    limit = settings.MAX_ACTIVE_RUNS
    active = Run.objects.filter(owner=user, status__in=ACTIVE).count()
    if active >= limit:
        raise LimitExceeded(
            f"you have {active} runs queued or running, the most one account may have at "
            f"once ({limit}). Wait for some to finish, or cancel some.",
            code="too_many_active_runs",
            retry_after_s=30,
        )


@dataclass(frozen=True)
class StoredBytes:
    """What a user's files take in storage, by kind (the storage quota counts all three)."""

    models: int
    input_sets: int
    artifacts: int

    @property
    def total(self) -> int:
        return self.models + self.input_sets + self.artifacts


def stored_bytes(user) -> StoredBytes:
    """The user's stored bytes: uploaded models and input sets, and the artifacts (compiled
    libraries, sub-models, plans) of the user's runs. A file two rows share (a retried
    run's kept artifacts, one input set given to two models) counts once."""
    from django.db.models import Max, Sum

    from workbench.models import Artifact, InputData, OnnxModel

    def total(queryset) -> int:
        per_file = queryset.order_by().values("file").annotate(size=Max("size_bytes"))
        return per_file.aggregate(total=Sum("size"))["total"] or 0

    return StoredBytes(
        models=total(OnnxModel.objects.filter(owner=user)),
        input_sets=total(InputData.objects.filter(owner=user)),
        artifacts=total(Artifact.objects.filter(run__owner=user)),
    )


def check_storage(user, adding: int, what: str = "this upload") -> None:
    """Refuse ``what`` (``adding`` bytes) when it would take the user's stored bytes over
    the quota."""
    limit = settings.MAX_STORED_BYTES
    used = stored_bytes(user).total
    if used + adding > limit:
        raise LimitExceeded(
            f"{what} ({adding / 1e6:,.1f} MB) would take your stored files to "
            f"{(used + adding) / 1e9:,.2f} GB, over your quota of {limit / 1e9:,.2f} GB. "
            "Delete models, input sets or runs (their artifacts) you no longer need.",
            code="storage_quota",
        )


def _duration(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{round(seconds / 60)} min"
    return f"{round(seconds / 3600)} h"
