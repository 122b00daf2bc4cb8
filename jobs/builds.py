"""Tuning candidates built on other workers as well as here.

MetaSchedule measures a batch of candidates at a time, and building them (LLVM code
generation) costs more than running them on a small model. A tuning stage holds one of
its worker's processes; the candidates of each batch are shared between this machine's
build processes and the other live workers (every worker consumes the builds queue), in
proportion to their processes. A candidate goes to another worker as TVM's JSON of its
scheduled module and comes back as the exported library, through the broker and the
Redis result store; one that does not come back in time counts as a failed build, as
MetaSchedule's own builder counts a build past its timeout.

Used only when a result store (Redis) is configured and another live worker consumes the
builds queue; otherwise tuning builds on this machine alone, as before.
"""

from __future__ import annotations

import base64
import logging
import os
import socket
import tempfile
import time
from collections import Counter

from django.conf import settings

from workbench import queues, workers
from workbench.celery import app

log = logging.getLogger(__name__)

BUILD_TASK = "workbench.build_candidate"
# queueing and transfer on top of MetaSchedule's own build timeout
QUEUE_MARGIN_S = 60.0


@app.task(name=BUILD_TASK, ignore_result=False, acks_late=True)
def build_candidate(mod_json: str, target: dict) -> dict:
    """Build one candidate (the IRModule's JSON) for ``target``; returns the exported
    library (MetaSchedule's tar format), base64, and who built it."""
    import tvm
    from tvm.support.tar import tar

    from engine.fusion.tuning import build_candidate as build

    started = time.perf_counter()
    library = build(tvm.ir.load_json(mod_json), tvm.target.Target(target))
    with tempfile.TemporaryDirectory(prefix="wb-build-") as tmp:
        path = os.path.join(tmp, "candidate." + tar.output_format)
        library.export_library(path, fcompile=tar)
        with open(path, "rb") as f:
            data = base64.b64encode(f.read()).decode()
    return {
        "library": data,
        "format": tar.output_format,
        "worker": build_candidate.request.hostname or socket.gethostname(),
        "seconds": round(time.perf_counter() - started, 3),
    }


def _plain(value):
    """A target's export (TVM containers) as JSON data."""
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    if hasattr(value, "__iter__"):
        return [_plain(v) for v in value]
    if hasattr(value, "export"):  # a nested target (host)
        return _plain(value.export())
    return str(value)


def spread_builder(threads: int, own_hostname: str):
    """A builder over this machine and the other live workers, or None (build here alone:
    no result store, or no other worker)."""
    if not getattr(settings, "CELERY_RESULT_BACKEND", "") or not settings.DISTRIBUTED_BUILDS:
        return None
    others = [
        w
        for w in workers.live_workers()
        if w.hostname != own_hostname and queues.builds_queue() in w.queues
    ]
    if not others:
        return None
    return _make_builder(threads, sum(w.concurrency for w in others))


def _make_builder(threads: int, remote_processes: int):
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder

    from engine.fusion.tuning import BUILD_TIMEOUT_S, local_builder

    @derived_object
    class SpreadBuilder(PyBuilder):
        """Builds ``remote`` of every ``local + remote`` candidates on other workers."""

        def __init__(self) -> None:
            super().__init__()
            self.local = local_builder(threads)
            self.local_processes = min(2, threads)
            self.remote_processes = remote_processes
            self.builds_by_worker: Counter = Counter()

        def build(self, build_inputs):
            share = self.remote_processes / (self.remote_processes + self.local_processes)
            # every k-th candidate, k from the share of processes (spread evenly in order)
            remote = [i for i in range(len(build_inputs)) if int((i + 1) * share) > int(i * share)]
            pending = {i: self._send(build_inputs[i]) for i in remote}
            here = [i for i in range(len(build_inputs)) if i not in pending]
            results = dict(
                zip(here, self.local.build([build_inputs[i] for i in here]), strict=True)
            )
            self.builds_by_worker["this worker"] += len(here)
            for i, sent in pending.items():
                results[i] = self._receive(sent, BuilderResult)
            return [results[i] for i in range(len(build_inputs))]

        def _send(self, build_input):
            import tvm

            return app.send_task(
                BUILD_TASK,
                args=[tvm.ir.save_json(build_input.mod), _plain(build_input.target.export())],
                queue=queues.builds_queue(),
                expires=BUILD_TIMEOUT_S + QUEUE_MARGIN_S,
            )

        def _receive(self, sent, result_type):
            try:
                answer = sent.get(
                    timeout=BUILD_TIMEOUT_S + QUEUE_MARGIN_S, disable_sync_subtasks=False
                )
            except Exception as e:  # noqa: BLE001 - timeout, a worker's build error: a failed candidate
                return result_type(None, f"remote build failed: {type(e).__name__}: {e}")
            finally:
                sent.forget()
            path = os.path.join(tempfile.mkdtemp(prefix="wb-remote-build-"),
                                "tvm_tmp_mod." + answer["format"])  # fmt: skip
            with open(path, "wb") as f:
                f.write(base64.b64decode(answer["library"]))
            self.builds_by_worker[answer["worker"]] += 1
            return result_type(path, None)

    return SpreadBuilder()
