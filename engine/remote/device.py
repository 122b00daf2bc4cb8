"""A session on a remote device through a TVM RPC tracker, and what the device says about
itself.

A measurement on a device is only worth something with the device named: its key, the
server address the tracker gave us, and what it reported (CPU, target triple, threads).
TVM's RPC errors (a device that drops mid-run, a session past its timeout) become
:class:`DeviceUnavailable` with code ``device_lost`` so the run says so and ends.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import socket
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from engine.errors import ProgressFn
from engine.remote import tracker
from engine.remote.tracker import DeviceUnavailable
from engine.targets.profile import Remote


@dataclass
class DeviceSession:
    """An open RPC session: ``session`` is TVM's ``RPCSession``, ``device`` its CPU."""

    remote: Remote
    assignment: tracker.Assignment
    session: object
    reported: dict = field(default_factory=dict)

    @property
    def device(self):
        return self.session.cpu(0)

    def describe(self) -> dict:
        """The device as results name it."""
        return {
            "key": self.remote.key,
            "tracker": self.remote.tracker,
            "address": self.assignment.address,
            "reported": dict(self.reported),
        }

    def label(self) -> str:
        cpu = self.reported.get("cpu") or "CPU not reported"
        return f"device '{self.remote.key}' at {self.assignment.address} ({cpu})"

    def tvm_target(self, threads: int = 0) -> dict:
        """The LLVM target to build for: the profile's, else what the device reported."""
        if self.remote.tvm_target:
            target = dict(self.remote.tvm_target)
        else:
            target = {"kind": "llvm"}
            if self.reported.get("triple"):
                target["mtriple"] = self.reported["triple"]
            if self.reported.get("cpu"):
                target["mcpu"] = self.reported["cpu"]
        cores = threads or self.reported.get("threads")
        if cores:
            target.setdefault("num-cores", int(cores))
        return target


@contextlib.contextmanager
def open_device(remote: Remote, progress: ProgressFn | None = None) -> Iterator[DeviceSession]:
    """Wait for a free device under ``remote.key`` and open a session on it."""
    from tvm import rpc

    def waiting(message: str) -> None:
        if progress is not None:
            progress(0.0, message)

    assignment = tracker.request(
        remote.tracker_host, remote.tracker_port, remote.key, wait_s=remote.wait_s,
        progress=waiting,
    )  # fmt: skip
    try:
        session = rpc.connect(
            assignment.host,
            assignment.port,
            key=assignment.match_key,
            session_timeout=remote.session_timeout_s,
        )
    except Exception as e:  # noqa: BLE001 - TVM raises RuntimeError/TVMError alike
        raise DeviceUnavailable(
            f"the device '{remote.key}' at {assignment.address} refused the session: {e}",
            code="device_lost",
            hint="Check the device's RPC server log, then run the stage again.",
        ) from e
    opened = DeviceSession(remote, assignment, session)
    with device_errors(opened):
        opened.reported = _self_report(session)
    try:
        yield opened
    except BaseException as e:
        # an exception keeps the frames it came through, and their remote modules and
        # tensors hold the session: kept in a report or a log, it would keep the device
        # leased until the session's timeout. The frames are done; their locals go.
        traceback.clear_frames(e.__traceback__)
        raise
    finally:
        # TVM's RPCSession has no close(): the last reference closes the socket, and the
        # device goes back to the tracker's pool (gc: a reference cycle may hold one)
        opened.session = session = None
        gc.collect()


@contextlib.contextmanager
def device_errors(opened: DeviceSession) -> Iterator[None]:
    """Turn TVM's RPC failures inside the block into ``device_lost``."""
    try:
        yield
    except DeviceUnavailable:
        raise
    except Exception as e:
        if not _is_rpc_failure(e):
            raise
        raise DeviceUnavailable(
            f"{opened.label()} stopped answering: {str(e).splitlines()[0][:300]}",
            code="device_lost",
            hint="The device or its RPC server went away mid-run; run the stage again.",
        ) from e


_NETWORK_ERRNOS = {
    errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENETDOWN, errno.EHOSTDOWN, errno.ENOTCONN,
    errno.ESHUTDOWN,
}  # fmt: skip


def _is_rpc_failure(error: Exception) -> bool:
    """TVM reports a broken link as RPCError, or as an InternalError from its RPC
    endpoint ("code == RPCCode::kReturn"), or as a socket error. Other OS errors (a
    file of ours missing or unreadable) are this worker's, not the device's."""
    if isinstance(error, OSError):
        return isinstance(
            error, (ConnectionError, TimeoutError, socket.gaierror, socket.herror)
        ) or (error.filename is None and error.errno in _NETWORK_ERRNOS)
    text = f"{type(error).__name__} {error}".lower()
    return any(w in text for w in ("rpc", "socket", "connection"))


def _self_report(session) -> dict:
    """What the device's runtime says about itself (None where it has no answer)."""

    def ask(name: str, *args, convert: Callable = str):
        try:
            return convert(session.get_function(name)(*args))
        except Exception:  # noqa: BLE001 - a minimal runtime lacks the LLVM queries
            return None

    return {
        "cpu": ask("target.llvm_get_system_cpu"),
        "triple": ask("target.llvm_get_system_triple"),
        "threads": ask("runtime.NumThreads", convert=int),
        "workdir": ask("tvm.rpc.server.workpath", ""),
    }
