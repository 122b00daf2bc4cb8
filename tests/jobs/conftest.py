"""Fixtures of the jobs tests: stages run in-process by the worker's task."""

from __future__ import annotations

import pytest


@pytest.fixture
def enqueued(monkeypatch):
    """The stages the pipeline enqueues, in order, instead of sending them to a broker."""
    sent = []
    monkeypatch.setattr("workbench.pipeline.enqueue_stage", sent.append)
    monkeypatch.setattr("workbench.pipeline.publish_run", lambda run_id: None)
    monkeypatch.setattr("jobs.progress.publish_run", lambda run_id: None)
    return sent


@pytest.fixture
def no_heartbeat(settings):
    """In-process, the heartbeat thread's own connection cannot see a test's uncommitted
    rows and would take a stage running longer than a beat for cancelled; tests/integration
    covers heartbeats with real workers."""
    settings.RUN_HEARTBEAT_SECONDS = 3600
