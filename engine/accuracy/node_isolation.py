"""Node cases in worker processes (``spawn``): with an :class:`Isolation` a compiler
that segfaults, aborts or hangs on one case costs that case only: it is a failure with
the signal or the time limit as the reason, the worker is replaced and the run goes on.
"""

from __future__ import annotations

import contextlib
import faulthandler
import multiprocessing
import os
import pickle
import re
import signal
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from multiprocessing.connection import wait
from pathlib import Path

import onnx

from engine.accuracy.candidates import Candidate, make_candidate
from engine.accuracy.errors import CandidateError
from engine.accuracy.node_cases import NodeCase, precheck
from engine.accuracy.node_report import CaseResult, case_result, describe_error


@dataclass(frozen=True)
class Isolation:
    """Run each case in a worker process (``spawn``), ``timeout_s`` at most per case.

    A case whose worker dies (signal, exit) or runs out of time fails with that reason,
    the stage it had reached and the worker's last line of output; the worker is
    replaced. A candidate given as a factory must be picklable (a module-level function).
    """

    timeout_s: float = 120.0
    workers: int = 1


def candidate_factory(candidate, options: Mapping) -> Callable[[onnx.ModelProto], Candidate]:
    """``candidate`` as a factory: a factory as it is, a name made with ``options``."""
    if callable(candidate):
        return candidate
    return lambda model: make_candidate(candidate, model, **options)


def run_isolated(
    run_case, candidate, options, cases, thresholds, isolation, done
) -> list[CaseResult]:
    """The cases on ``isolation.workers`` worker processes, in the cases' order, each run
    by ``run_case`` (a module-level function: a worker receives it by name)."""
    context = multiprocessing.get_context("spawn")
    results: dict[int, CaseResult] = {}
    todo = deque()
    for index, case in enumerate(cases):
        skipped = precheck(case)  # no need for a worker, nor to send values it cannot take
        if skipped is None:
            todo.append((index, case))
        else:
            results[index] = skipped
            done(skipped)
    workers: list[_Worker | None] = [None] * max(1, isolation.workers)
    with tempfile.TemporaryDirectory(prefix="node-suite-") as logs:
        try:
            while todo or any(w is not None and w.job for w in workers):
                for k, worker in enumerate(workers):
                    if todo and (worker is None or not worker.job):
                        if worker is None:
                            log = Path(logs) / f"worker{k}.log"
                            workers[k] = worker = _Worker(
                                context, (run_case, candidate, options, thresholds), log
                            )
                        worker.submit(*todo.popleft(), isolation.timeout_s)
                busy = [w for w in workers if w is not None and w.job]
                deadline = min(w.deadline for w in busy)
                wait(
                    [x for w in busy for x in (w.conn, w.process.sentinel)],
                    max(0.0, deadline - time.monotonic()),
                )
                for k, worker in enumerate(workers):
                    found = worker.collect() if worker is not None and worker.job else None
                    if found is not None:
                        results[found[0]] = found[1]
                        done(found[1])
                    # A worker that died after collect() looked keeps its job: the next
                    # round's collect() reports the crash instead of losing the case.
                    if worker is not None and not worker.job and not worker.process.is_alive():
                        worker.close()
                        workers[k] = None
        finally:
            for worker in workers:
                if worker is not None:
                    worker.close()
    return [results[i] for i in range(len(cases))]


class _Worker:
    """One worker process and the case it is on (``job``: index and case)."""

    def __init__(self, context, setup: tuple, log: Path):
        self.conn, child = context.Pipe()
        self.log = log
        self.process = context.Process(
            target=_serve, args=(child, *setup, str(log)), daemon=True, name="node-suite-worker"
        )
        try:
            self.process.start()
        except (pickle.PicklingError, AttributeError, TypeError) as e:
            raise CandidateError(
                f"the candidate cannot be sent to a worker process: {e}",
                hint="Give a candidate name, or a factory defined at module level.",
            ) from e
        finally:
            child.close()
        self.job: tuple[int, NodeCase] | None = None
        self.stage, self.started, self.deadline, self.timeout_s = "", 0.0, 0.0, 0.0
        try:
            if self.conn.poll(_STARTUP_S) and self.conn.recv() == ("ready", None):
                return
        except (EOFError, OSError):
            self.process.join(5)
        self.close()
        last = _last_line(log)
        raise CandidateError(
            f"the node-suite worker did not start ({_exit_reason(self.process.exitcode)})"
            + (f": {last}" if last else ""),
            hint="A script that runs the suite isolated needs an "
            "`if __name__ == '__main__':` guard (the worker imports it again).",
        )

    def submit(self, index: int, case: NodeCase, timeout_s: float) -> None:
        self.job, self.stage = (index, case), "compile"
        self.started = time.monotonic()
        self.deadline, self.timeout_s = self.started + timeout_s, timeout_s
        self.conn.send(case)

    def collect(self) -> tuple[int, CaseResult] | None:
        """The finished job's result, a failure if the worker died or ran out of time,
        else ``None`` (still working)."""
        index, case = self.job
        try:
            while self.conn.poll():
                kind, value = self.conn.recv()
                if kind == "stage":
                    self.stage = value
                    continue
                if kind == "setup":
                    raise CandidateError(*value)
                self.job = None
                return index, replace(value, seconds=self._seconds())
        except (EOFError, OSError):
            self.process.join(5)  # the pipe closed: the worker is exiting
        if not self.process.is_alive():
            reason = f"crashed: {_exit_reason(self.process.exitcode)} during {self.stage}"
        elif time.monotonic() >= self.deadline:
            with contextlib.suppress(ProcessLookupError):  # it writes where it is stuck
                os.kill(self.process.pid, _STACK_SIGNAL)
            self.process.join(_STACK_WAIT_S)
            self.process.kill()
            self.process.join()
            reason = f"timed out after {self.timeout_s:g} s during {self.stage}"
            where = _stuck_at(self.log)
            reason += f" at {where}" if where else ""
        else:
            return None
        last = _last_line(self.log)
        reason += f" (last output: {last})" if last else ""
        self.job = None
        result = case_result(case, "fail", self.stage, reason)
        return index, replace(result, seconds=self._seconds())

    def close(self) -> None:
        if self.process.is_alive():
            with contextlib.suppress(OSError):
                self.conn.send(None)
            self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()

    def _seconds(self) -> float:
        return round(time.monotonic() - self.started, 3)


def _serve(conn, run_case, candidate, options, thresholds, log: str) -> None:
    """A worker's loop: receive a case, send its stages and its result, until ``None``."""
    # Native code writes straight to the descriptors: keep it out of the parent's output,
    # and keep the last line of it to explain a crash.
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    faulthandler.register(_STACK_SIGNAL, file=sys.stderr, all_threads=False)
    factory = candidate_factory(candidate, options)
    conn.send(("ready", None))
    while True:
        try:
            case = conn.recv()
        except EOFError:
            return
        if case is None:
            return
        os.ftruncate(out, 0)
        stage = ["compile"]

        def enter(name: str, stage=stage) -> None:
            stage[0] = name
            conn.send(("stage", name))

        try:
            result = run_case(factory, case, thresholds, enter)
        except CandidateError as e:  # the candidate cannot be set up: no case will run
            conn.send(("setup", (e.message,)))
            return
        except Exception as e:  # noqa: BLE001 - one case's bug must not end the run
            result = case_result(case, "fail", stage[0], f"internal error: {describe_error(e)}")
        conn.send(("result", result))


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _last_line(path: Path) -> str:
    """The worker's last line of output that is not a Python stack dump."""
    lines = [line.strip() for line in _output(path).split(_STACK_HEADER)[0].splitlines()]
    lines = [line for line in lines if line]
    return lines[-1][:200] if lines else ""


def _stuck_at(path: Path) -> str:
    """Where the stack the worker dumped stands: the innermost frame, and the innermost
    one in the engine when that is another."""
    _, found, stack = _output(path).rpartition(_STACK_HEADER)
    frames = _FRAME.findall(stack) if found else []
    if not frames:
        return ""
    shown = [frames[0]] + [f for f in frames[1:] if f[0].startswith(f"{_ROOT}/engine/")][:1]
    return ", from ".join(f"{_short(file)}:{line} {func}" for file, line, func in shown)


def _output(path: Path) -> str:
    try:
        return path.read_bytes()[-20000:].decode("utf-8", "replace")
    except OSError:
        return ""


def _short(file: str) -> str:
    """A source path from its package or this project down: ``tvm/...``, ``engine/...``."""
    _, found, tail = file.partition("/site-packages/")
    if found:
        return tail
    _, found, tail = file.partition("/lib/python3")
    if found:
        return tail.split("/", 1)[-1]
    _, found, tail = file.partition(f"{_ROOT}/")
    return tail if found else file


_STARTUP_S = 120.0  # importing the candidate's packages in a fresh process
_ROOT = str(Path(__file__).resolve().parents[2])
_STACK_SIGNAL = signal.SIGUSR1
_STACK_WAIT_S = 2.0
_STACK_HEADER = "Stack (most recent call first):"
_FRAME = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')
