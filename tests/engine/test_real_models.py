"""The real-model set (bench/real_models.py): every export loads, passes the checker and runs
in onnxruntime at its export shapes (the dynamic ones at other shapes too), and the set
covers the families, both exporters, and static and dynamic axes.

The first run exports the set (a few minutes); later runs read the cache."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from bench.real_models import MODELS, ensure_models, example_feeds, load_manifest

# the cold build exports every model inside the first test's setup
pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def real_models():
    paths = ensure_models()
    return paths, load_manifest()


def _run(path, feeds):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.get_outputs(), session.run(None, feeds)


@pytest.mark.parametrize("name", list(MODELS))
def test_model_runs_at_its_export_shapes(real_models, name):
    paths, manifest = real_models
    meta = manifest[name]
    onnx.checker.check_model(str(paths[name]))
    outputs, results = _run(paths[name], example_feeds(meta))
    assert [o.name for o in outputs] == [o["name"] for o in meta["outputs"]]
    for out, result in zip(meta["outputs"], results, strict=True):
        assert all(np.isfinite(result).flat), out["name"]
        # random weights that keep activations at scale: outputs of zeros (or 1e-24, what
        # transformers' N(0, 0.02) gave MobileNetV2) make every accuracy check compare zeros
        if result.dtype.kind == "f":
            assert np.abs(result).max() > 1e-4, (out["name"], np.abs(result).max())
        # a dimension the exporter wrote as a number is the one the model computes
        for dim, size in zip(out["shape"], result.shape, strict=True):
            assert isinstance(dim, str) or dim == size, (out["name"], out["shape"], result.shape)


@pytest.mark.parametrize("name", [name for name, spec in MODELS.items() if spec.dynamic], ids=str)
def test_dynamic_model_runs_at_other_shapes(real_models, name):
    paths, manifest = real_models
    meta = dict(manifest[name])
    axes = {"batch": 3, "sequence": 48}
    meta["inputs"] = [
        {
            **spec,
            "shape": [
                axes[meta["dynamic_axes"][spec["name"]][str(i)]]
                if str(i) in meta["dynamic_axes"].get(spec["name"], {})
                else size
                for i, size in enumerate(spec["shape"])
            ],
        }
        for spec in meta["inputs"]
    ]
    _, results = _run(paths[name], example_feeds(meta))
    for out, result in zip(meta["outputs"], results, strict=True):
        assert out["shape"][0] == "batch", out
        expected = tuple(axes.get(dim, dim) for dim in out["shape"])
        assert result.shape == expected, (out["name"], result.shape, expected)


def test_set_covers_families_exporters_and_axes(real_models):
    _, manifest = real_models
    metas = list(manifest.values())
    assert set(manifest) >= set(MODELS)
    assert len({m["family"] for m in metas}) >= 12
    exporters = [m["exporter"] for m in metas]
    assert exporters.count("dynamo") >= 4 and exporters.count("torchscript") >= 6
    dynamic = [m["name"] for m in metas if m["dynamic_axes"]]
    assert len(dynamic) >= 4 and len(dynamic) < len(metas)
    for m in metas:
        assert m["opset"] == 18 and m["ir_version"] <= 10, m["name"]
        assert m["bytes"] < 30e6 and m["macs"] > 0, m["name"]


def test_exports_keep_the_exporters_shape_arithmetic(real_models):
    """Nothing was simplified: the transformer exports still compute shapes at run time."""
    _, manifest = real_models
    for name in ("bert_ts", "bert_dynamo", "gpt2_ts", "gpt2_dynamo", "swin_ts"):
        assert manifest[name]["ops"].get("Shape", 0) > 0, name


def test_recurrent_macs_match_the_gate_formula(real_models):
    """2 layers, input 64, hidden 128, 32 steps, a 128 -> 32 head on every step. The GRU's
    gates are counted by FlopCounterMode, the LSTM's fused kernel by the formula."""
    _, manifest = real_models
    head = 32 * 128 * 32
    for name, gates, source in (("lstm_ts", 4, "formula"), ("gru_ts", 3, "flop_counter")):
        rnn = 32 * gates * 128 * ((64 + 128) + (128 + 128))
        assert manifest[name]["macs"] == rnn + head, name
        assert manifest[name]["mac_source"] == source, name


def test_two_exports_of_one_model_compare_op_by_op(real_models, capsys):
    """BERT through torchscript and through dynamo: no node name in common, so the ops are
    aligned by structure; every MatMul of the encoder finds its partner and what has none
    (the exporters' shape arithmetic) is listed, not dropped."""
    import json

    from cli.main import main
    from engine.report.compare import RunReports, compare_runs

    paths, _ = real_models
    reports = []
    for name in ("bert_ts", "bert_dynamo"):
        argv = ["profile", str(paths[name]), "--window-s", "0.5", "--no-tvm-kernels", "--json"]
        assert main(argv) == 0
        reports.append(json.loads(capsys.readouterr().out))
    got = compare_runs(
        [
            RunReports(i, n, {"profile": r})
            for i, (n, r) in enumerate(zip(("ts", "dynamo"), reports, strict=True))
        ]
    )
    ops = got["ops"]
    assert ops["method"] == "by structure (op types in graph order)"
    matmuls = [r for r in ops["rows"] if r["op_type"] == "MatMul" and "encoder" in r["name"]]
    assert matmuls and all(r["names"][1] and r["latency_us"][1] for r in matmuls)
    # Every timed op of either export is in a row or in the not-aligned list.
    timed = [len([o for o in r["ops"] if o["status"] != "folded"]) for r in reports]
    unaligned = {u["run"]: len(u["ops"]) for u in ops["unaligned"]}
    assert len(ops["rows"]) == timed[0]
    aligned = sum(1 for r in ops["rows"] if r["names"][1] is not None)
    assert aligned + unaligned.get(1, 0) == timed[1] and aligned > 0.5 * timed[1]
