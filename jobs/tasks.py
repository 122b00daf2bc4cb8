"""Celery tasks. Thin: claim the stage, call one engine function, store the outcome."""

from __future__ import annotations

import logging
import socket
import traceback

from celery.exceptions import SoftTimeLimitExceeded
from celery.signals import celeryd_after_setup, celeryd_init, worker_ready, worker_shutdown
from django.db import connection

from engine.contract import NotApplicable
from engine.errors import Cancelled, EngineError
from jobs import builds, runner
from jobs.policy import TRANSIENT_ERRORS, WorkbenchTask
from jobs.presence import Presence, declared_targets
from jobs.progress import Heartbeat, ProgressSink, StageTimedOut
from jobs.registry import machine_queue, register_machine
from workbench import pipeline, queues, workers
from workbench.celery import app
from workbench.limits import LimitExceeded
from workbench.models import Status

log = logging.getLogger(__name__)
__all__ = ["builds"]  # its task registers with the app when the worker imports this module


@app.task(name=pipeline.RUN_STAGE_TASK, base=WorkbenchTask, bind=True)
def run_stage(self, stage_id: int) -> str:
    stage = pipeline.claim_stage(stage_id, worker=self.request.hostname or socket.gethostname())
    if stage is None:
        return "not claimed"
    # the limit the message carried (enqueue_stage sets it from the stage registry)
    limit = (self.request.timelimit or (None, None))[1] or pipeline.stage_time_limit(stage.stage)
    sink = ProgressSink(stage.pk, stage.run_id, time_limit_s=limit)
    with Heartbeat(stage.pk, sink):
        try:
            result = runner.run(stage, sink)
        except (SoftTimeLimitExceeded, StageTimedOut):
            return _timed_out(stage, limit)
        except Cancelled:
            return "cancelled"
        except NotApplicable as e:  # not a failure: the stages after it run
            pipeline.finish_stage(
                stage, status=Status.NOT_APPLICABLE, message=f"not applicable: {_said(e)}"
            )
            return "not applicable"
        except runner.PreparationFailed as e:  # no stage of the run can use the model
            pipeline.fail_stage(stage.pk, code=e.error.code, message=_said(e.error), skip_all=True)
            return "failed"
        except EngineError as e:  # a verdict on the input: deterministic, never retried
            if _hit_time_limit(e, sink):  # an engine step wrapped Celery's soft limit
                return _timed_out(stage, limit)
            pipeline.fail_stage(stage.pk, code=e.code, message=_said(e))
            return "failed"
        except LimitExceeded as e:  # its artifacts would go over the owner's storage quota
            pipeline.fail_stage(stage.pk, code=e.code, message=e.message)
            return "failed"
        except TRANSIENT_ERRORS:
            pipeline.release_stage(stage.pk)
            raise
        except Exception as e:  # noqa: BLE001 - any other failure is reported, not lost
            if _hit_time_limit(e, sink):
                return _timed_out(stage, limit)
            log.exception("stage %s of run %s crashed", stage.stage, stage.run_id)
            pipeline.fail_stage(
                stage.pk,
                code="internal_error",
                message=f"internal error in the {stage.stage} stage: {type(e).__name__}: {e}",
                log_excerpt=traceback.format_exc(),
            )
            return "failed"
    pipeline.finish_stage(stage, result=result)
    return "succeeded"


def _hit_time_limit(error: BaseException, sink: ProgressSink) -> bool:
    """The stage's time limit, under whatever error an engine step made of it."""
    seen = error
    while seen is not None:
        if isinstance(seen, SoftTimeLimitExceeded | StageTimedOut):
            return True
        seen = seen.__cause__ or seen.__context__
    return sink.past_deadline()


def _timed_out(stage, limit: float) -> str:
    # Celery's soft limit can fire inside a database query (a progress write): the
    # connection is then left mid-query and refuses the next transaction. Start afresh.
    try:
        connection.close()
    except Exception:  # noqa: BLE001 - a broken connection may not close cleanly; Django reopens
        log.warning("closing the interrupted database connection failed", exc_info=True)
    pipeline.fail_stage(
        stage.pk,
        code="time_limit",
        message=f"the {stage.stage} stage ran past its {limit:g} s limit and was stopped",
    )
    return "failed"


def _said(error: EngineError) -> str:
    return f"{error.message} {error.hint}".strip() if error.hint else error.message


@app.task(name="workbench.reap_stale_stages", base=WorkbenchTask, ignore_result=True)
def reap_stale_stages() -> int:
    reaped = pipeline.reap_stale_stages()
    workers.refresh_waiting()  # a worker that died leaves its target's stages waiting
    return reaped


@celeryd_init.connect
def _declare_targets(sender, instance, options, **_kwargs) -> None:
    instance.workbench_targets = declared_targets(options.get("targets"))


@celeryd_after_setup.connect
def _consume_queues(sender, instance, **_kwargs) -> None:
    # Runs on this machine's measured target are routed here and only here. A worker that
    # declares targets leaves the shared queue (its heartbeat adds it back for `host`) and
    # consumes its targets' queues from its first heartbeat on (jobs.presence).
    instance.app.amqp.queues.select_add(machine_queue())
    if getattr(instance, "workbench_targets", None):
        instance.app.amqp.queues.deselect(queues.shared_queue())


@worker_ready.connect
def _on_worker_ready(**_kwargs) -> None:
    # A worker that restarts after a crash fails its predecessor's orphans right away.
    pipeline.reap_stale_stages()
    register_machine()


@worker_shutdown.connect
def _on_worker_shutdown(sender, **_kwargs) -> None:
    # Gone at once, so stages for targets only it served say they wait for a worker.
    try:
        workers.retire(sender.hostname)
        workers.refresh_waiting()
    except Exception:  # noqa: BLE001 - shutting down with the database away is still a shutdown
        log.warning("could not mark worker %s gone", sender.hostname, exc_info=True)


app.steps["consumer"].add(Presence)
