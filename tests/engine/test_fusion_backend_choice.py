"""Each segment on the backend that measured faster; never a mix slower than onnxruntime
alone. The per-segment times are set here (the measurement itself is the timing module's);
the whole-model check runs for real, in fresh processes."""

from __future__ import annotations

import json

import numpy as np
from test_fusion_compile import FAST, conv_relu_conv

from engine.fusion import CompileConfig, compile_model, delegate
from engine.fusion.backend_choice import SegmentChoice, moved_to_onnxruntime, same_tvm_segments
from engine.fusion.standalone import CompiledModel

CHOOSING = {**FAST, "choose_backends": True}


def timed(monkeypatch, tvm_ms: float, onnxruntime_ms: float) -> None:
    """Each segment's TVM run takes ``tvm_ms``, its onnxruntime run ``onnxruntime_ms``
    (the runs still happen, once each)."""
    medians = iter([tvm_ms, onnxruntime_ms] * 10)

    def time_calls(run, config):
        run()
        return {"median": next(medians)}

    monkeypatch.setattr("engine.fusion.backend_choice.time_calls", time_calls)


def test_a_segment_onnxruntime_runs_faster_moves_there_and_the_artifact_says_why(
    save, tmp_path, monkeypatch
):
    timed(monkeypatch, tvm_ms=10.0, onnxruntime_ms=1.0)  # everything moves
    result = compile_model(save(conv_relu_conv()), CompileConfig(str(tmp_path / "c"), **CHOOSING))
    data = result.to_dict()
    assert data["backend"] == "onnxruntime" and data["tvm_nodes"] == 0
    (choice,) = data["backend_choice"]
    assert (choice["tvm_ms"], choice["onnxruntime_ms"], choice["backend"]) == (10, 1, "onnxruntime")
    assert "onnxruntime measured faster" in choice["reason"]
    assert all("onnxruntime measured faster" in f["reason"] for f in data["fallback_nodes"])
    # The artifact is onnxruntime alone, on its best thread setting, and gives the outputs.
    manifest = json.loads((tmp_path / "c" / "artifact" / "manifest.json").read_text())
    assert [s["backend"] for s in manifest["segments"]] == ["onnxruntime"]
    assert manifest["threads"] == data["timing"]["onnxruntime_threads"]
    assert data["outputs_match"] is True
    # Fair timing: fresh processes, both thread settings, memory of each side.
    timing = data["timing"]
    assert set(timing["onnxruntime_ms_by_threads"]) == {"1"}  # FAST: one thread
    assert timing["peak_memory"]["compiled"]["peak_rss_bytes"] > 0
    assert data["peak_memory"] == timing["peak_memory"]


def test_a_segment_tvm_runs_faster_stays(save, tmp_path, monkeypatch):
    timed(monkeypatch, tvm_ms=1.0, onnxruntime_ms=10.0)
    data = compile_model(
        save(conv_relu_conv()), CompileConfig(str(tmp_path / "c"), **CHOOSING)
    ).to_dict()
    (choice,) = data["backend_choice"]
    assert choice["backend"] == "tvm" and "TVM measured faster" in choice["reason"]
    # The whole-model check then decided, on its own measurement, and said which it kept.
    if data["backend"] == "onnxruntime":
        mix = data["timing"]["mix"]
        assert mix["latency_ms"] >= mix["onnxruntime_latency_ms"] * 0.95
        assert "was not faster than onnxruntime alone" in data["fallback_nodes"][0]["reason"]
    else:
        assert data["backend"] == "tvm" and data["kernels"]
        assert data["latency_ms"] < data["onnxruntime_latency_ms"]


def test_moving_a_segment_keeps_the_builds_of_the_others(save):
    model = conv_relu_conv("Celu")  # conv1 -> Celu (onnxruntime) -> conv2 -> relu2
    before = delegate.partition(model, {"mid"})
    assert [(s.backend, s.nodes) for s in before] == [
        ("tvm", ["conv1"]),
        ("onnxruntime", ["mid"]),
        ("tvm", ["conv2", "relu2"]),
    ]
    # conv1 moves: it merges with its onnxruntime neighbour, conv2 + relu2 keep their build.
    after = delegate.partition(model, {"mid", "conv1"})
    assert [(s.backend, s.nodes) for s in after] == [
        ("onnxruntime", ["conv1", "mid"]),
        ("tvm", ["conv2", "relu2"]),
    ]
    assert same_tvm_segments(before, after) == {1: 2}
    # relu2 moves: the last TVM segment changes, so it is built again.
    assert same_tvm_segments(before, delegate.partition(model, {"mid", "relu2"})) is None
    choice = SegmentChoice(("a", "b"), 2.0, 1.0, delegate.ORT)
    assert moved_to_onnxruntime([choice]) == {"a": choice.reason, "b": choice.reason}


def test_the_mixed_runtime_runs_what_the_choice_left(save, tmp_path):
    result = compile_model(
        save(conv_relu_conv("Celu")), CompileConfig(str(tmp_path / "c"), **CHOOSING)
    )
    model = CompiledModel(tmp_path / "c" / "artifact")
    feeds = model.example_inputs(seed=1)
    outputs = model.run(feeds)
    assert all(np.isfinite(v).all() for v in outputs.values())
    assert result.to_dict()["backend"] in ("mixed", "onnxruntime")
