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


def test_the_runner_lets_tvm_workers_sleep_soon_after_a_kernel():
    """TVM's pool workers spin (sched_yield) up to 300000 times after a kernel by default:
    next to an onnxruntime segment they held a core its threads needed, and a SqueezeNet
    split ran 2.3x slower in 4 fresh processes of 23. The runner sets 3000 before TVM's
    pool starts, unless the user has set a count of their own."""
    import engine.fusion.standalone as runner

    code = "import os, runpy, sys; runpy.run_path(sys.argv[1]); print(os.environ['TVM_THREAD_POOL_SPIN_COUNT'])"
    env = {k: v for k, v in os.environ.items() if k != "TVM_THREAD_POOL_SPIN_COUNT"}

    def spin_count(**extra) -> str:
        done = subprocess.run(
            [sys.executable, "-c", code, runner.__file__],
            env=env | extra,
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        return done.stdout.split()[-1]

    assert spin_count() == "3000"
    assert spin_count(TVM_THREAD_POOL_SPIN_COUNT="77") == "77"
