"""A compiler call in a forked child: result, error, crash, time limit, cancellation."""

from __future__ import annotations

import os
import signal
import time

import pytest

from engine.errors import Cancelled
from engine.fusion.forked import ChildFailed, ChildTimeout, call_forked, fork_available

pytestmark = pytest.mark.skipif(not fork_available(), reason="needs fork (Linux)")


def add(a, b):
    return {"sum": a + b, "pid": os.getpid()}


def fail():
    raise ValueError("first line\nthe reason")


def crash():
    os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would


def hang():
    time.sleep(600)


def test_the_result_comes_back_from_another_process():
    result = call_forked(add, (2, 3), timeout_s=30)
    assert result["sum"] == 5 and result["pid"] != os.getpid()


def test_an_exception_comes_back_with_its_type_and_last_line():
    with pytest.raises(ChildFailed) as info:
        call_forked(fail, (), timeout_s=30)
    assert info.value.kind == "ValueError" and str(info.value) == "the reason"


def test_a_crash_is_reported_with_its_signal():
    with pytest.raises(ChildFailed, match="died of SIGKILL") as info:
        call_forked(crash, (), timeout_s=30)
    assert info.value.kind == "crash"


def test_a_hang_is_ended_at_the_time_limit():
    started = time.monotonic()
    with pytest.raises(ChildTimeout, match="did not finish in 1 s"):
        call_forked(hang, (), timeout_s=1)
    assert time.monotonic() - started < 10


def test_a_cancellation_seen_while_waiting_ends_the_child():
    seen = []

    def poll(elapsed_s: float) -> None:
        seen.append(elapsed_s)
        raise Cancelled("cancelled by the user")

    started = time.monotonic()
    with pytest.raises(Cancelled):
        call_forked(hang, (), timeout_s=600, poll=poll)
    assert seen and time.monotonic() - started < 10


def test_a_started_call_runs_beside_the_caller_and_can_be_ended():
    from engine.fusion.forked import start_forked

    started = time.monotonic()
    pending = start_forked(add, (2, 3))
    assert time.monotonic() - started < 5  # it returned before the child finished
    assert pending.result(timeout_s=30)["sum"] == 5
    hanging = start_forked(hang, ())
    pid = hanging._pid
    hanging.cancel()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # ended and reaped: no child left behind
    hanging.cancel()  # twice is harmless
