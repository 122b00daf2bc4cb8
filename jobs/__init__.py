"""Celery side of the workbench: one task per stage, orchestration and progress."""

from jobs.celery import app as celery_app

__all__ = ["celery_app"]
