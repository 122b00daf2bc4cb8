"""Acceptance of the artifact: it runs in a fresh virtual environment that has only the
packages its manifest names, and reproduces the outputs.

The venv is made without pip and filled by this environment's pip (``pip --python``),
from the package index: about 10 s here, most of it downloading TVM's 100 MB wheel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile

import numpy as np
from test_fusion_compile import FAST, conv_relu_conv

from engine.fusion import CompileConfig, compile_model
from engine.fusion.standalone import CompiledModel


def test_artifact_runs_in_a_fresh_venv_and_reproduces_the_outputs(save, tmp_path):
    # Celu falls back to onnxruntime, so the artifact exercises both kinds of segment.
    result = compile_model(save(conv_relu_conv("Celu")), CompileConfig(str(tmp_path / "c"), **FAST))
    unpacked = tmp_path / "unpacked"
    with tarfile.open(result.artifact) as tar:
        tar.extractall(unpacked, filter="data")
    model_dir = unpacked / "model"
    manifest = json.loads((model_dir / "manifest.json").read_text())
    assert any(r.startswith("onnxruntime==") for r in manifest["requirements"])

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet"]
        + manifest["requirements"],
        check=True,
        timeout=600,
    )
    feeds = CompiledModel(model_dir).example_inputs(seed=3)
    np.savez(tmp_path / "in.npz", **feeds)
    subprocess.run(
        [
            str(python),
            str(model_dir / "run.py"),
            "--inputs",
            str(tmp_path / "in.npz"),
            "--out",
            str(tmp_path / "out.npz"),
            "--threads",
            "1",
        ],
        check=True,
        timeout=300,
        cwd=tmp_path,
        env={"PATH": os.environ.get("PATH", "")},
    )
    expected = CompiledModel(model_dir, threads=1).run(feeds)
    with np.load(tmp_path / "out.npz") as got:
        assert set(got.files) == set(expected)
        for name, value in expected.items():
            np.testing.assert_array_equal(got[name], value)


def test_a_mix_stops_tvm_workers_spinning_and_a_tvm_model_keeps_tvms_default(save, tmp_path):
    """TVM's pool workers spin (sched_yield) up to 300000 times after a kernel by default:
    beside an onnxruntime segment they held a core its threads needed (a SqueezeNet split
    ran 2.3x slower in 4 fresh processes of 23). The runner of a mix sets 3000 before TVM's
    pool starts; a model on TVM alone keeps TVM's default; a user's own count stands. The
    engine's process uses 3000 for itself, and does not hand it to a runner it times."""
    from engine.fusion.threadpool import SET_HERE, runner_environment

    mixed = compile_model(save(conv_relu_conv("Celu")), CompileConfig(str(tmp_path / "m"), **FAST))
    alone = compile_model(save(conv_relu_conv("Relu")), CompileConfig(str(tmp_path / "t"), **FAST))
    mixed, alone = _unpacked(mixed, tmp_path / "mixed"), _unpacked(alone, tmp_path / "alone")
    assert {s["backend"] for s in _manifest(mixed)["segments"]} == {"tvm", "onnxruntime"}
    assert {s["backend"] for s in _manifest(alone)["segments"]} == {"tvm"}
    code = (
        "import os, sys; sys.path.insert(0, sys.argv[1]); from run import CompiledModel; "
        "m = CompiledModel(sys.argv[1]); m.run(m.example_inputs()); "
        "print(os.environ.get('TVM_THREAD_POOL_SPIN_COUNT', 'unset'))"
    )
    env = {k: v for k, v in os.environ.items() if k != "TVM_THREAD_POOL_SPIN_COUNT"}

    def spin_count(model_dir, **extra) -> str:
        done = subprocess.run(
            [sys.executable, "-c", code, str(model_dir)],
            env=env | extra,
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        )
        return done.stdout.split()[-1]

    assert spin_count(mixed) == "3000"
    assert spin_count(alone) == "unset"
    assert spin_count(mixed, TVM_THREAD_POOL_SPIN_COUNT="77") == "77"
    assert os.environ["TVM_THREAD_POOL_SPIN_COUNT"] == "3000" or not SET_HERE
    assert "TVM_THREAD_POOL_SPIN_COUNT" not in runner_environment() or not SET_HERE


def _unpacked(result, directory):
    with tarfile.open(result.artifact) as tar:
        tar.extractall(directory, filter="data")
    return directory / "model"


def _manifest(model_dir) -> dict:
    return json.loads((model_dir / "manifest.json").read_text())
