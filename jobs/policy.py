"""Celery task policy in one place: names, retries for transient infrastructure errors only."""

from __future__ import annotations

from celery import Task
from django.db import InterfaceError, OperationalError
from kombu.exceptions import OperationalError as BrokerError

# Database or broker hiccups are worth a retry; everything else is a verdict on the input.
TRANSIENT_ERRORS = (OperationalError, InterfaceError, BrokerError, ConnectionError)


class WorkbenchTask(Task):
    acks_late = True
    autoretry_for = TRANSIENT_ERRORS
    retry_backoff = 2
    retry_backoff_max = 60
    retry_jitter = True
    max_retries = 3
    # Stage time limits come from the stage registry; this is the backstop for the rest.
    soft_time_limit = 60 * 60
    time_limit = 60 * 60 + 60
