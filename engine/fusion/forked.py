"""Run one compiler call in a forked child process, with a time limit.

TVM's compiler can hang in native code on some kernels (seen here: its rewrite
simplifier looping for minutes on the floordiv/floormod chains of a SpaceToDepth's
reshape-transpose-reshape, depending on where objects sit in memory), and native code
cannot be interrupted from Python. A forked child inherits the loaded compiler and the
module to build (no import, no serialization), writes its files and sends back a small
picklable result; the parent waits with a deadline, asks ``poll`` between waits (so a
cancellation is seen), and ends the child when either runs out. The child dies with its
parent (``PR_SET_PDEATHSIG``), so a killed worker leaves no compiler running.

MetaSchedule's builders isolate candidate builds the same way, in a process pool with a
timeout.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import select
import signal
import sys
import time
from collections.abc import Callable

_POLL_S = 1.0


class ChildTimeout(Exception):
    """The call did not finish within the time limit (the child was ended)."""


class ChildFailed(Exception):
    """The call raised in the child (``kind`` is the exception's type name) or the child
    died (a signal: ``kind`` is ``crash``)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def fork_available() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "fork")


def call_forked(
    fn: Callable,
    args: tuple,
    *,
    timeout_s: float,
    poll: Callable[[float], None] | None = None,
):
    """``fn(*args)`` in a forked child; its return value (which must pickle).

    Raises :class:`ChildTimeout` after ``timeout_s``, :class:`ChildFailed` when ``fn``
    raised or the child died, and whatever ``poll(elapsed_s)`` raises (the child is
    ended first). Without fork (not Linux) it calls ``fn`` here, with no time limit.

    Plain ``os.fork``, not ``multiprocessing``: that refuses to start children from a
    daemonic process, which Celery's pool workers and our node-suite workers are.
    """
    return start_forked(fn, args).result(timeout_s=timeout_s, poll=poll)


class Pending:
    """A call running in a forked child (see :func:`start_forked`)."""

    def __init__(self, fn: Callable, args: tuple):
        self._fn, self._args = fn, args
        self._pid = None
        if not fork_available():
            return  # called in result(), here
        self._read_fd, write_fd = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child
            os.close(self._read_fd)
            _child(write_fd, fn, args)
        os.close(write_fd)
        self._pid, self._started = pid, time.monotonic()

    def result(self, *, timeout_s: float, poll: Callable[[float], None] | None = None):
        """Wait for the call's return value; ``timeout_s`` counts from its start. Raises as
        :func:`call_forked` does, and ends the child on any way out but its own end."""
        if self._pid is None:
            return self._fn(*self._args)
        pid, started = self._pid, self._started
        chunks: list[bytes] = []
        status = None
        try:
            with os.fdopen(self._read_fd, "rb") as pipe:
                while True:
                    elapsed = time.monotonic() - started
                    if elapsed >= timeout_s:
                        raise ChildTimeout(f"did not finish in {timeout_s:g} s")
                    ready, _, _ = select.select([pipe], [], [], min(_POLL_S, timeout_s - elapsed))
                    if ready:
                        chunk = os.read(pipe.fileno(), 1 << 20)
                        if not chunk:  # the child closed its end: it is done
                            break
                        chunks.append(chunk)
                        continue
                    if poll is not None:
                        poll(time.monotonic() - started)
            _, status = os.waitpid(pid, 0)
        finally:
            self._pid = None
            if status is None:
                _end(pid)
        try:
            kind, value = pickle.loads(b"".join(chunks))
        except (pickle.UnpicklingError, EOFError, ValueError):
            raise ChildFailed("crash", _exit_reason(status)) from None
        if kind == "ok":
            return value
        raise ChildFailed(*value)

    def cancel(self) -> None:
        """End the child, if it still runs: its result is not wanted."""
        if self._pid is not None:
            os.close(self._read_fd)
            _end(self._pid)
            self._pid = None


def start_forked(fn: Callable, args: tuple) -> Pending:
    """Start ``fn(*args)`` in a forked child and return at once: the caller goes on with
    other work (a second build on the other core) and then asks :meth:`Pending.result`, or
    :meth:`Pending.cancel` when the result is no longer wanted. Without fork, ``fn`` runs
    in ``result()``."""
    return Pending(fn, args)


def _end(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, ChildProcessError):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def _child(write_fd: int, fn, args) -> None:
    """Run ``fn``, send the outcome, and leave without running the parent's exit code."""
    code = 0
    try:
        _die_with_parent()
        try:
            result = ("ok", fn(*args))
        except BaseException as e:  # noqa: BLE001 - everything goes back to the parent
            lines = [line.strip() for line in str(e).splitlines() if line.strip()]
            result = ("error", (type(e).__name__, lines[-1] if lines else ""))
        data = pickle.dumps(result)
        with os.fdopen(write_fd, "wb") as pipe:
            pipe.write(data)
    except BaseException:  # noqa: BLE001 - nothing may escape into the parent's code
        code = 1
    finally:
        os._exit(code)


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() == 1:  # the parent is already gone
        os._exit(1)


def _exit_reason(status: int | None) -> str:
    if status is not None and os.WIFSIGNALED(status):
        with contextlib.suppress(ValueError):
            return f"the compiler process died of {signal.Signals(os.WTERMSIG(status)).name}"
    code = os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else status
    return f"the compiler process exited with code {code}"
