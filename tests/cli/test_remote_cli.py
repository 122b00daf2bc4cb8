"""``workbench profile|compile MODEL --target remote --tracker HOST:PORT --key KEY``: no
server, the engine straight on a device behind a real TVM RPC tracker on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from rpc_devices import loopback_tracker
from test_remote_devices import small_model

from cli.main import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def devices(rpc_tracker):
    rpc_tracker.ensure_devices("board", 1)
    return rpc_tracker


def workbench(*argv: str) -> subprocess.CompletedProcess:
    """The console script as a user runs it: its own process, stdin closed."""
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *argv],
        capture_output=True, text=True, cwd=ROOT, stdin=subprocess.DEVNULL, timeout=600,
    )  # fmt: skip


def test_profile_and_compile_measure_on_the_device(devices, save, tmp_path):
    model = save(small_model())
    remote = ["--target", "remote", "--tracker", devices.address, "--key", "board"]
    done = workbench("profile", model, *remote, "--window-s", "0.3", "--json")
    assert done.returncode == 0, done.stderr
    profile = json.loads(done.stdout)
    assert profile["measured"] is True and profile["latency_ms"] > 0
    assert profile["target"] == "remote:board"
    assert profile["measured_on"]["key"] == "board"
    assert {op["name"] for op in profile["ops"]} >= {"conv", "fc"}
    assert all(op["latency_us"] > 0 for op in profile["ops"] if op["name"] in ("conv", "fc"))

    out = tmp_path / "out"
    done = workbench("compile", model, *remote, "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    compiled = json.loads(done.stdout)
    assert compiled["measured_on"]["address"].startswith("127.0.0.1:")
    assert compiled["latency_ms"] > 0 and compiled["outputs_match"] is True
    assert compiled["onnxruntime_latency_ms"] is None
    with tarfile.open(compiled["artifact"]) as tar:
        assert "model/manifest.json" in tar.getnames()


def test_remote_flags_are_checked_before_anything_runs(capsys, save):
    model = save(small_model())
    assert main(["profile", model, "--target", "remote", "--key", "k", "--json"]) == 2
    assert "--tracker" in capsys.readouterr().err
    assert main(["profile", model, "--tracker", "h:1", "--json"]) == 2
    assert "--target remote" in capsys.readouterr().err
    code = main(["profile", model, "--target", "remote", "--tracker", "h:x", "--key", "k"])
    assert code == 2 and "port must be a number" in capsys.readouterr().err


def test_a_stopped_tracker_is_a_clear_error_not_a_hang(capsys, save):
    model = save(small_model())
    with loopback_tracker() as loop:
        address = loop.address
    code = main(["profile", model, "--target", "remote", "--tracker", address, "--key", "k"])
    err = capsys.readouterr().err
    assert code == 2 and "cannot be reached" in err and address in err
