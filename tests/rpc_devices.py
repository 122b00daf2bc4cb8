"""Real TVM RPC on loopback for the tests about remote devices: a tracker and RPC servers
("devices") started as their own processes with TVM's own entry points, exactly as a
user runs them (``python -m tvm.exec.rpc_tracker`` / ``rpc_server``)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from engine.remote import tracker as tracker_protocol


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Loopback:
    """A tracker on ``host:port`` and the device servers registered with it."""

    host: str
    port: int
    log_dir: Path
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def add_device(self, key: str, timeout_s: float = 30.0) -> str:
        """Start an RPC server registered under ``key``; returns its name once the
        tracker lists it."""
        (name,) = self.add_devices(key, 1, timeout_s)
        return name

    def add_devices(self, key: str, count: int, timeout_s: float = 30.0) -> list[str]:
        """Start ``count`` RPC servers registered under ``key`` together (each spends
        seconds importing TVM) and return their names once the tracker lists them all."""
        before = self._servers(key)
        started = []
        for _ in range(count):
            name = self._unused_name(key)
            port = _free_port()
            self.processes[name] = _start(
                self.log_dir / f"{name}.log",
                "tvm.exec.rpc_server",
                "--tracker", self.address, "--key", key,
                "--host", "127.0.0.1", "--port", str(port), "--port-end", str(port + 1),
            )  # fmt: skip
            started.append(name)
        deadline = time.monotonic() + timeout_s
        while self._servers(key) < before + count:
            for name in started:
                if time.monotonic() > deadline or self.processes[name].poll() is not None:
                    raise RuntimeError(f"device {name} did not register: {self.log(name)}")
            time.sleep(0.1)
        return started

    def ensure_devices(self, key: str, count: int) -> None:
        """At least ``count`` devices under ``key``: a tracker shared by several test
        modules starts each key's devices once."""
        missing = count - self._servers(key)
        if missing > 0:
            self.add_devices(key, missing)

    def _unused_name(self, key: str) -> str:
        """``key-N``, N the first that names no device started here (nor its log)."""
        n = 0
        while f"{key}-{n}" in self.processes or (self.log_dir / f"{key}-{n}.log").exists():
            n += 1
        return f"{key}-{n}"

    def stop_device(self, name: str) -> None:
        _stop(self.processes.pop(name))

    def log(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text()[-3000:] if path.exists() else ""

    def _servers(self, key: str) -> int:
        try:
            info = tracker_protocol.summary(self.host, self.port)
        except tracker_protocol.DeviceUnavailable:
            return 0
        listed = sum(1 for s in info["servers"] if s["key"] == key)
        # registered once it has also offered itself to the key's queue
        return min(listed, info["keys"].get(key, {}).get("free", 0))


@contextlib.contextmanager
def loopback_tracker(devices: dict[str, int] | None = None) -> Iterator[Loopback]:
    """A tracker with ``{key: count}`` devices; everything is stopped on exit."""
    log_dir = Path(tempfile.mkdtemp(prefix="wb-rpc-"))
    port = _free_port()
    loop = Loopback("127.0.0.1", port, log_dir)
    loop.processes["tracker"] = _start(
        log_dir / "tracker.log",
        "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port),
        "--port-end", str(port + 1),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                tracker_protocol.summary("127.0.0.1", port, timeout_s=1)
                break
            except tracker_protocol.DeviceUnavailable:
                if time.monotonic() > deadline or loop.processes["tracker"].poll() is not None:
                    raise RuntimeError(f"tracker did not start: {loop.log('tracker')}") from None
                time.sleep(0.1)
        for key, count in (devices or {}).items():
            loop.add_devices(key, count)
        yield loop
    finally:
        for name in [n for n in loop.processes if n != "tracker"] + ["tracker"]:
            _stop(loop.processes.pop(name))


def _start(log: Path, module: str, *args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # the server forks a child per session: stop them all
        )


def _stop(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, 15)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 9)
        process.wait(timeout=10)
