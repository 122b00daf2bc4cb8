"""MetaSchedule tuning through the record store: reuse on a second compile, cancellation.

Budgets are a handful of trials on a tiny matmul so that a run takes seconds of search
(the measuring builds dominate on a shared two-core machine).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from onnx import helper, numpy_helper
from onnx_builders import build

from engine.errors import Cancelled
from engine.fusion import CompileConfig, compile_model
from engine.fusion.tuning_store import DirectoryStore

pytest.importorskip("tvm")
# MetaSchedule runs take minutes on two shared cores and failed once under load in the
# lead's run (see issue 8's note): opt-in until they are made quick and robust.
pytestmark = pytest.mark.skipif(
    os.environ.get("WORKBENCH_SLOW_TESTS") != "1", reason="slow: set WORKBENCH_SLOW_TESTS=1"
)

FAST = {"threads": 1, "timing_window_s": 0.1, "kernel_timing_runs": 1}


def dense_model():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w")
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="dense")
    return build([node], [("x", [32, 64])], [("y", [32, 64])], [w])


def test_second_compile_reuses_the_store_without_tuning(save, tmp_path):
    path, store = save(dense_model()), tmp_path / "store"
    first = compile_model(
        path, CompileConfig(str(tmp_path / "a"), tune_trials=8, tuning_store=str(store), **FAST)
    ).to_dict()
    assert first["tuning"]["trials"] >= 1 and first["tuning"]["tasks_tuned"] == 1
    assert DirectoryStore(store).count() == 1
    assert first["outputs_match"] is True
    second = compile_model(
        path, CompileConfig(str(tmp_path / "b"), tuning_store=str(store), **FAST)
    ).to_dict()
    assert second["tuning"]["trials"] == 0
    # A record is used exactly when tuning beat the default schedule on this machine.
    assert second["tuning"]["records_used"] == first["tuning"]["improved"]
    schedules = {k["schedule"] for k in second["kernels"]}
    assert ("tuned" in schedules) == bool(first["tuning"]["improved"])
    assert second["outputs_match"] is True


def test_raising_cancelled_from_progress_stops_tuning(save, tmp_path):
    messages = []

    def progress(fraction, message):
        messages.append(message)
        if message.startswith("tuning:"):
            raise Cancelled("stopped by the user")

    config = CompileConfig(str(tmp_path / "c"), tune_trials=64, **FAST)
    with pytest.raises(Cancelled):
        compile_model(save(dense_model()), config, progress)
    assert "trials" in messages[-1] and "estimated latency" in messages[-1]
