"""A TVM RPC tracker's protocol, spoken without TVM: the queue of each device key, and a
request for a device that waits a bounded time and can be cancelled.

TVM's own ``TrackerSession`` retries a dead tracker for about a minute and waits for a
busy device forever; a run must instead say "tracker unreachable", "no device with that
key" or "busy, N waiting" and give up when told to. The web process uses :func:`summary`
for the Targets page, so nothing here imports tvm.

The protocol (``tvm/rpc/base.py``, ``tvm/rpc/tracker.py``): a 4-byte little-endian magic
each way, then length-prefixed JSON lists ``[code, ...]``.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from engine.errors import Cancelled, EngineError

TRACKER_MAGIC = 0x2F271
_SUCCESS, _REQUEST, _SUMMARY = 0, 4, 6
MAX_MESSAGE = 16 << 20  # a summary of thousands of devices is far smaller


class DeviceUnavailable(EngineError):
    """The device cannot be reached: tracker down, key unknown, device busy or gone."""

    code = "device_unavailable"


@dataclass(frozen=True)
class Assignment:
    """The server the tracker gave us: connect to ``host:port`` with ``match_key``."""

    host: str
    port: int
    match_key: str

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class TrackerConnection:
    """One connection to a tracker (closing it withdraws a pending request)."""

    def __init__(self, host: str, port: int, timeout_s: float = 5.0):
        self.address = f"{host}:{port}"
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as e:
            raise DeviceUnavailable(
                f"the RPC tracker at {self.address} cannot be reached: {e.strerror or e}",
                code="tracker_unreachable",
                hint="Start it (python -m tvm.exec.rpc_tracker --host 0.0.0.0 --port 9190) "
                "or fix the target's tracker address.",
            ) from e
        try:
            self.sock.sendall(struct.pack("<i", TRACKER_MAGIC))
            (magic,) = struct.unpack("<i", self._exactly(4))
        except (OSError, DeviceUnavailable) as e:
            self.close()
            raise DeviceUnavailable(
                f"{self.address} did not answer as a TVM RPC tracker",
                code="tracker_unreachable",
                hint="Check the port: it must be the tracker's, not a device server's.",
            ) from e
        if magic != TRACKER_MAGIC:
            self.close()
            raise DeviceUnavailable(
                f"{self.address} is not a TVM RPC tracker (it answered another protocol)",
                code="tracker_unreachable",
                hint="Check the port: it must be the tracker's, not a device server's.",
            )

    def call(self, message: list, timeout_s: float | None = 10.0) -> list:
        """Send ``message`` and read the answer; ``socket.timeout`` when none came in time."""
        self.send(message)
        return self.receive(timeout_s)

    def send(self, message: list) -> None:
        data = json.dumps(message).encode()
        try:
            self.sock.sendall(struct.pack("<i", len(data)) + data)
        except OSError as e:
            raise self._lost(e) from e

    def receive(self, timeout_s: float | None) -> list:
        self.sock.settimeout(timeout_s)
        (size,) = struct.unpack("<i", self._exactly(4))
        self.sock.settimeout(30.0)  # the rest of a message follows at once
        if not 0 <= size <= MAX_MESSAGE:
            raise DeviceUnavailable(f"the tracker at {self.address} sent a {size}-byte message")
        answer = json.loads(self._exactly(size))
        if not isinstance(answer, list) or not answer:
            raise DeviceUnavailable(f"the tracker at {self.address} sent {answer!r}")
        return answer

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def _exactly(self, size: int) -> bytes:
        chunks, left = [], size
        while left:
            try:
                chunk = self.sock.recv(min(left, 1 << 20))
            except TimeoutError:
                raise
            except OSError as e:
                raise self._lost(e) from e
            if not chunk:
                raise self._lost(None)
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _lost(self, error: OSError | None) -> DeviceUnavailable:
        why = f": {error}" if error else ""
        return DeviceUnavailable(
            f"the connection to the RPC tracker at {self.address} was lost{why}",
            code="tracker_unreachable",
            hint="Check that the tracker is still running, then run the stage again.",
        )

    def __enter__(self) -> TrackerConnection:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()


def summary(host: str, port: int, timeout_s: float = 5.0) -> dict:
    """The tracker's view: ``{"keys": {key: {"free", "pending", "total"}}, "servers":
    [{"key", "address"}]}``. Raises :class:`DeviceUnavailable` when it does not answer."""
    with TrackerConnection(host, port, timeout_s) as tracker:
        try:
            answer = tracker.call([_SUMMARY], timeout_s)
        except TimeoutError as e:
            raise DeviceUnavailable(
                f"the RPC tracker at {tracker.address} did not answer in {timeout_s:g} s",
                code="tracker_unreachable",
            ) from e
    if answer[0] != _SUCCESS or len(answer) < 2 or not isinstance(answer[1], dict):
        raise DeviceUnavailable(f"the tracker at {host}:{port} refused a summary: {answer!r}")
    raw = answer[1]
    servers = []
    for item in raw.get("server_info") or []:
        key = str(item.get("key", ""))
        addr = item.get("addr") or ["?", "?"]
        servers.append(
            {
                "key": key.removeprefix("server:"),
                "address": f"{addr[0]}:{addr[1]}",
            }
        )
    keys = {}
    for key, queue in (raw.get("queue_info") or {}).items():
        free, pending = int(queue.get("free", 0)), int(queue.get("pending", 0))
        total = sum(1 for s in servers if s["key"] == key)
        keys[key] = {"free": free, "pending": pending, "total": max(total, free)}
    return {"tracker": f"{host}:{port}", "keys": keys, "servers": servers}


def request(
    host: str,
    port: int,
    key: str,
    *,
    wait_s: float,
    progress: Callable[[str], None] | None = None,
    priority: int = 1,
    poll_s: float = 2.0,
) -> Assignment:
    """Ask the tracker for a device registered under ``key``; wait up to ``wait_s`` while
    every such device is busy. ``progress`` is called with a message about every
    ``poll_s`` seconds of waiting and may raise :class:`Cancelled` (the request is then
    withdrawn). Raises :class:`DeviceUnavailable` with code ``device_missing`` when no
    device has that key, ``device_busy`` when the wait ran out."""
    state = summary(host, port)
    queue = state["keys"].get(key)
    if queue is None:
        known = ", ".join(sorted(state["keys"])) or "none"
        raise DeviceUnavailable(
            f"no device is registered under key '{key}' at the RPC tracker {host}:{port} "
            f"(keys there: {known})",
            code="device_missing",
            hint="Start the device's RPC server with --tracker "
            f"{host}:{port} --key {key}, or fix the target's key.",
        )
    started = time.monotonic()
    with TrackerConnection(host, port) as tracker:
        tracker.send([_REQUEST, key, "", priority])
        while True:
            try:
                answer = tracker.receive(timeout_s=poll_s)
                break
            except TimeoutError:
                waited = time.monotonic() - started
                if waited >= wait_s:
                    raise DeviceUnavailable(
                        f"every device under key '{key}' stayed busy for {waited:.0f} s "
                        f"(the target's wait_s is {wait_s:g} s)",
                        code="device_busy",
                        hint="Run again later, add devices under this key, or raise wait_s.",
                    ) from None
                if progress is not None:
                    try:
                        progress(_waiting(host, port, key, waited))
                    except Cancelled:
                        raise  # leaving the block closes the socket: the request is withdrawn
    if answer[0] != _SUCCESS or len(answer) < 2 or len(answer[1]) != 3:
        raise DeviceUnavailable(f"the tracker refused the request for '{key}': {answer!r}")
    device_host, device_port, match_key = answer[1]
    return Assignment(str(device_host), int(device_port), str(match_key))


def _waiting(host: str, port: int, key: str, waited: float) -> str:
    try:
        queue = summary(host, port)["keys"].get(key) or {}
    except DeviceUnavailable:
        queue = {}
    busy = f"{queue.get('total', '?')} device(s), {queue.get('pending', '?')} request(s) waiting"
    return f"waiting {waited:.0f} s for device '{key}' ({busy})"
