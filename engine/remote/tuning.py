"""MetaSchedule on remote devices: candidates measured on every device registered under a
key, each measurement recorded with the device that made it.

MetaSchedule's ``RPCRunner`` asks the tracker for a session per candidate from a pool of
worker processes; with as many workers as the key has devices, the tracker hands each a
free device, so every device measures at once and the trial budget is shared. The
session is opened here (instead of by TVM's default) to learn which server the tracker
gave, and each measurement appends that address to a log the compile stage reads back.
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from pathlib import Path

from engine.remote import tracker
from engine.targets.profile import Remote


def rpc_runner(remote: Remote, device_log: Path, evaluator_config):
    """A MetaSchedule ``RPCRunner`` over every device under ``remote.key`` that logs each
    measurement's device address to ``device_log``."""
    from tvm.s_tir import meta_schedule as ms

    devices = tracker.summary(remote.tracker_host, remote.tracker_port)["keys"].get(remote.key)
    workers = max(1, (devices or {}).get("total", 1))
    config = ms.runner.RPCConfig(
        tracker_host=remote.tracker_host,
        tracker_port=remote.tracker_port,
        tracker_key=remote.key,
        session_priority=1,
        session_timeout_sec=int(max(60, min(remote.session_timeout_s, 600))),
    )
    return ms.runner.RPCRunner(
        config,
        evaluator_config=evaluator_config,
        max_workers=workers,
        f_create_session=functools.partial(
            create_session, wait_s=remote.wait_s, log=str(device_log)
        ),
    )


def create_session(rpc_config, *, wait_s: float, log: str):
    """Open a session through the tracker and note which device it landed on (runs in
    MetaSchedule's runner processes)."""
    from tvm import rpc

    given = tracker.request(
        rpc_config.tracker_host, rpc_config.tracker_port, rpc_config.tracker_key, wait_s=wait_s
    )
    session = rpc.connect(
        given.host, given.port, key=given.match_key, session_timeout=rpc_config.session_timeout_sec
    )
    line = f"{given.address}\n".encode()
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)  # one short append: whole lines even from several processes
    finally:
        os.close(fd)
    return session


def devices_used(device_log: Path) -> dict[str, int]:
    """Measurements per device address, from the log :func:`create_session` wrote."""
    if not device_log.exists():
        return {}
    return dict(Counter(line for line in device_log.read_text().split() if line))
