"""The Celery application. Policy that applies to every task lives here and in policy.py."""

from __future__ import annotations

import os

from celery import Celery
from click import Option

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "workbench.settings")

app = Celery("workbench")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    result_serializer="json",
    task_ignore_result=True,  # results live in PostgreSQL (StageResult), not in Celery
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    task_reject_on_worker_lost=False,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    worker_send_task_events=False,
    beat_schedule={
        "reap-stale-stages": {"task": "workbench.reap_stale_stages", "schedule": 10.0},
    },
)
# `celery -A jobs worker --targets a,b`: the targets this worker serves (workbench/queues.py).
app.user_options["worker"].add(
    Option(
        ["--targets"],
        default=None,
        help="Comma-separated target names this worker serves (default: "
        "WORKBENCH_WORKER_TARGETS, else every target but other machines' measured ones).",
    )
)
# Imported by the worker after Django is set up (its fixup runs django.setup() first).
app.conf.imports = ("jobs.tasks",)
