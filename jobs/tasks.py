"""Celery tasks. Thin: claim the stage, call one engine function, store the outcome."""

from __future__ import annotations

import logging
import socket
import traceback

from celery.exceptions import SoftTimeLimitExceeded
from celery.signals import celeryd_after_setup, worker_ready

from engine.errors import Cancelled, EngineError
from jobs import pipeline
from jobs.celery import app
from jobs.policy import TRANSIENT_ERRORS, WorkbenchTask
from jobs.progress import Heartbeat, ProgressSink
from jobs.registry import machine_queue, register_machine
from jobs.runners import RUNNERS
from jobs.stages import STAGES

log = logging.getLogger(__name__)


@app.task(name=pipeline.RUN_STAGE_TASK, base=WorkbenchTask, bind=True)
def run_stage(self, stage_id: int) -> str:
    stage = pipeline.claim_stage(stage_id, worker=self.request.hostname or socket.gethostname())
    if stage is None:
        return "not claimed"
    sink = ProgressSink(stage.pk, stage.run_id)
    with Heartbeat(stage.pk, sink):
        try:
            result = RUNNERS[stage.stage](stage, sink)
        except Cancelled:
            return "cancelled"
        except EngineError as e:  # a verdict on the input: deterministic, never retried
            message = f"{e.message} {e.hint}".strip() if e.hint else e.message
            pipeline.fail_stage(stage.pk, code=e.code, message=message)
            return "failed"
        except SoftTimeLimitExceeded:
            limit = STAGES[stage.stage].time_limit_s
            pipeline.fail_stage(
                stage.pk,
                code="time_limit",
                message=f"the {stage.stage} stage ran past its {limit} s limit and was stopped",
            )
            return "failed"
        except TRANSIENT_ERRORS:
            pipeline.release_stage(stage.pk)
            raise
        except Exception as e:  # noqa: BLE001 - any other failure is reported, not lost
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


@app.task(name="workbench.reap_stale_stages", base=WorkbenchTask, ignore_result=True)
def reap_stale_stages() -> int:
    return pipeline.reap_stale_stages()


@celeryd_after_setup.connect
def _consume_machine_queue(sender, instance, **_kwargs) -> None:
    # Runs on this machine's measured target are routed here and only here.
    instance.app.amqp.queues.select_add(machine_queue())


@worker_ready.connect
def _on_worker_ready(**_kwargs) -> None:
    # A worker that restarts after a crash fails its predecessor's orphans right away.
    pipeline.reap_stale_stages()
    register_machine()
