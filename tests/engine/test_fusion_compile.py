"""compile_model end to end on tiny models: fusion plan, fallback, timing, artifact, CLI."""

from __future__ import annotations

import hashlib
import json
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
import tvm
from onnx import helper, numpy_helper
from onnx_builders import build

from cli.main import main
from engine.errors import EngineError
from engine.fusion import CompileConfig, compile_model, segment_builds

FAST = {
    "threads": 1,
    "timing_window_s": 0.1,
    "timing_rounds": 1,
    "kernel_timing_runs": 1,
    "choose_backends": False,  # these tests are about the TVM build (backend choice: its own)
    "conv_layout": "nchw",  # and its kernels' bytes; the layout choice: test_conv_layout
}


def _random(name, shape, seed):
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array((0.3 * rng.standard_normal(shape)).astype(np.float32), name)


def conv_relu_conv(middle: str = "Relu"):
    """x -> conv1 -> <middle> -> conv2 -> relu2 -> y, random weights."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node(middle, ["c1"], ["a1"], name="mid"),
        helper.make_node("Conv", ["a1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["y"], name="relu2"),
    ]
    inits = [
        _random("w1", (16, 3, 3, 3), 1),
        _random("b1", (16,), 2),
        _random("w2", (16, 16, 3, 3), 3),
        _random("b2", (16,), 4),
    ]
    return build(nodes, [("x", [1, 3, 16, 16])], [("y", [1, 16, 16, 16])], inits)


def attention(heads: int = 2, hidden: int = 32, seq: int = 16):
    """BERT-style self-attention: Q, K, V projections of x (MatMul + bias), split into
    heads (Reshape + Transpose), softmax(Q K^T) V, heads merged back."""
    nodes, inits = [], []
    head = hidden // heads
    shape = numpy_helper.from_array(np.array([1, seq, heads, head], np.int64), "heads")
    merged = numpy_helper.from_array(np.array([1, seq, hidden], np.int64), "merged")
    inits += [shape, merged]
    for k, name in enumerate("qkv"):
        perm = [0, 2, 3, 1] if name == "k" else [0, 2, 1, 3]
        nodes += [
            helper.make_node("MatMul", ["x", f"w{name}"], [f"m{name}"], name=name),
            helper.make_node("Add", [f"m{name}", f"b{name}"], [f"a{name}"], name=f"{name}_bias"),
            helper.make_node("Reshape", [f"a{name}", "heads"], [f"r{name}"], name=f"{name}_heads"),
            helper.make_node("Transpose", [f"r{name}"], [name], name=f"{name}_t", perm=perm),
        ]
        inits += [_random(f"w{name}", (hidden, hidden), k), _random(f"b{name}", (hidden,), 9 + k)]
    nodes += [
        helper.make_node("MatMul", ["q", "k"], ["s"], name="scores"),
        helper.make_node("Softmax", ["s"], ["p"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["c"], name="context"),
        helper.make_node("Transpose", ["c"], ["ct"], name="context_t", perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ct", "merged"], ["y"], name="merge_heads"),
    ]
    return build(nodes, [("x", [1, seq, hidden])], [("y", [1, seq, hidden])], inits)


@pytest.fixture(scope="module")
def conv_build(tmp_path_factory) -> dict:
    """conv_relu_conv compiled once for the tests that read its result or its artifact."""
    tmp = tmp_path_factory.mktemp("conv-build")
    path = tmp / "model.onnx"
    path.write_bytes(conv_relu_conv().SerializeToString())
    return compile_model(str(path), CompileConfig(str(tmp / "out"), **FAST)).to_dict()


def test_conv_model_compiles_matches_onnxruntime_and_names_its_kernels(conv_build):
    data = conv_build
    assert data["outputs_match"] is True
    assert data["fallback_nodes"] == [] and data["tvm_nodes"] == 4
    by_nodes = {tuple(k["nodes"]): k for k in data["kernels"]}
    # Conv + bias + ReLU is one kernel (FuseOps' epilogue fusion), named after ONNX nodes.
    assert ("conv1", "mid") in by_nodes and ("conv2", "relu2") in by_nodes
    kernel = by_nodes[("conv1", "mid")]
    assert kernel["souffle_class"] == "one-relies-on-many"
    assert kernel["intensity"] == "compute"
    assert kernel["op_types"] == ["Conv", "Relu"]
    # bytes: input 1x3x16x16 + weights 16x3x3x3 + bias 16, output 1x16x16x16 (float32)
    assert kernel["global_bytes"] == 4 * (3 * 256 + 16 * 27 + 16 + 16 * 256)
    assert all(k["time_us"] and k["time_us"] > 0 for k in data["kernels"])
    assert data["latency_ms"] > 0 and data["onnxruntime_latency_ms"] > 0
    stages = [s["name"] for s in data["fusion"]["stages"]]
    assert stages[:2] == ["unfused", "fuseops"]
    assert data["fusion"]["kernel_count"] <= data["fusion"]["kernel_count_fuseops"]
    assert data["target"]["target"]["kind"] == "llvm" and data["target"]["target"]["mcpu"]


def test_a_prepared_model_compiles_under_its_uploads_digest(tmp_path, monkeypatch):
    """The stage's input, the prepared model, is not serialized again to be hashed (VGG-19:
    2.9 s) nor to be timed in onnxruntime: the manifest names the upload's sha256 as the
    prepare step found it, and onnxruntime reads the prepared model's file."""
    from engine.fusion import compile as compile_module
    from engine.fusion import measurement
    from engine.graph.prepare import prepare_model

    path = tmp_path / "model.onnx"
    path.write_bytes(conv_relu_conv().SerializeToString())
    prepared = prepare_model(path, cache_dir=tmp_path / "prepared")
    hashed, timed_on = [], []
    monkeypatch.setattr(compile_module, "_source_sha256", lambda *a: hashed.append(a) or "x")
    model_file = measurement._model_file
    monkeypatch.setattr(
        measurement, "_model_file", lambda o, p: timed_on.append(o) or model_file(o, p)
    )
    result = compile_model(prepared, CompileConfig(str(tmp_path / "out"), **FAST))
    manifest = json.loads((tmp_path / "out" / "artifact" / "manifest.json").read_text())
    assert manifest["model_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert manifest["model_sha256"] == prepared.source_sha256 and not hashed
    # onnxruntime ran the prepared model's own file (VGG-19: 3.1 s to write a copy)
    assert [file for _, file in timed_on] == [prepared.path] and result.outputs_match is True

    # with the file evicted from its cache meanwhile, the model is saved as compiled
    evicted = prepare_model(path, cache_dir=tmp_path / "p3")
    real_measure = compile_module.measure

    def evicting(original, *args, **kwargs):
        Path(original[1]).unlink()
        return real_measure(original, *args, **kwargs)

    monkeypatch.setattr(compile_module, "measure", evicting)
    assert compile_model(evicted, CompileConfig(str(tmp_path / "c"), **FAST)).outputs_match


def test_artifact_holds_library_params_manifest_and_runner(conv_build):
    data = conv_build
    with tarfile.open(data["artifact"]) as tar:
        names = {m.name.removeprefix("model/") for m in tar.getmembers()}
        manifest = json.load(tar.extractfile("model/manifest.json"))
        for name, digest in manifest["files"].items():
            assert hashlib.sha256(tar.extractfile(f"model/{name}").read()).hexdigest() == digest
    assert {"manifest.json", "run.py", "segment0.so", "segment0.params.npz"} <= names
    # only what the runner reads: not the prepared model (VGG-19: 575 MB more to ship)
    assert not any(n.endswith(".onnx") for n in names)
    assert manifest["model_sha256"] and manifest["inputs"] == [
        {"name": "x", "shape": [1, 3, 16, 16], "dtype": "float32"}
    ]
    assert any(r.startswith("apache-tvm==") for r in manifest["requirements"])
    assert not any(r.startswith("onnxruntime") for r in manifest["requirements"])
    assert set(manifest["files"]) <= set(data["artifact_files"])


@pytest.mark.parametrize("layout", ["nchw", "blocked"])
def test_counting_kernels_without_the_weights_finds_the_kernels_a_build_gets(layout):
    """The fusion rules' trials fuse without computing the prepared weights: the same
    kernels, the same traffic, and no weights held."""
    from engine.fusion import plan
    from engine.fusion.build import fuse_segment
    from engine.fusion.importer import import_onnx
    from engine.fusion.preparation import dtypes
    from engine.fusion.target import resolve_target

    model = conv_relu_conv()
    target = resolve_target("host", 1).tvm_target()
    order = [n.name for n in model.graph.node]
    fused = [
        fuse_segment(import_onnx(model, {}, dtypes(model)), target, order, layout, weights=w)
        for w in (True, False)
    ]
    with_weights, counted = fused
    assert [c.func for c in counted.calls] == [c.func for c in with_weights.calls]
    assert plan.traffic(counted.calls) == plan.traffic(with_weights.calls) > 0
    assert with_weights.imported.params and not counted.imported.params


def test_a_segment_tvm_imports_but_cannot_fuse_falls_back_before_the_fusion_plan(
    save, tmp_path, monkeypatch
):
    """TVM imports the segment after Celu and then fails in its lowering (an unbound
    dimension in GPT-2's raw export did: emit_te's AssertionError): the segment runs in
    onnxruntime, with the reason, and the rest still compiles."""
    import engine.fusion.segment_builds as builds

    real = builds.fuse_segment

    def failing(imported, *args, **kwargs):
        if "conv2" in str(imported.binding_nodes):
            raise AssertionError("emit_te now only supports Tensor that has ShapeExpr shape")
        return real(imported, *args, **kwargs)

    monkeypatch.setattr(builds, "fuse_segment", failing)
    model = conv_relu_conv("Celu")
    data = compile_model(save(model), CompileConfig(str(tmp_path / "c"), **FAST)).to_dict()
    reasons = {f["node"]: f["reason"] for f in data["fallback_nodes"]}
    assert {"conv2", "relu2"} <= set(reasons)
    assert reasons["conv2"] == (
        "TVM could not compile its segment: AssertionError: emit_te now only supports "
        "Tensor that has ShapeExpr shape"
    )
    assert data["backend"] == "mixed" and data["outputs_match"] is True
    assert "conv1" not in reasons


def test_unsupported_op_runs_in_onnxruntime_and_is_reported(save, tmp_path):
    result = compile_model(save(conv_relu_conv("Celu")), CompileConfig(str(tmp_path / "o"), **FAST))
    data = result.to_dict()
    assert [(f["node"], f["op_type"]) for f in data["fallback_nodes"]] == [("mid", "Celu")]
    assert "no converter for Celu" in data["fallback_nodes"][0]["reason"]
    assert [s["backend"] for s in data["segments"]] == ["tvm", "onnxruntime", "tvm"]
    assert data["tvm_nodes"] == 3
    assert data["outputs_match"] is True


def test_a_second_build_in_the_same_place_runs_its_own_code(save, tmp_path):
    # The dynamic loader keeps the first library loaded from a path: the second model,
    # compiled into the same directory in the same process, must not run the first's code.
    config = CompileConfig(str(tmp_path / "same"), **FAST)
    first = compile_model(save(conv_relu_conv()), config).to_dict()
    second = compile_model(save(conv_relu_conv("Sigmoid")), config).to_dict()
    assert first["outputs_match"] is True and second["outputs_match"] is True


def hanging_build(*args):
    time.sleep(600)  # as TVM's simplifier did on a SpaceToDepth for minutes


def test_a_build_that_hangs_is_ended_and_its_segment_falls_back(save, tmp_path, monkeypatch):
    monkeypatch.setattr(segment_builds, "build_segment", hanging_build)
    config = CompileConfig(str(tmp_path / "o"), build_timeout_s=2, **FAST)
    started = time.monotonic()
    data = compile_model(save(conv_relu_conv()), config).to_dict()
    assert time.monotonic() - started < 60
    assert data["tvm_nodes"] == 0 and [s["backend"] for s in data["segments"]] == ["onnxruntime"]
    reasons = {f["reason"] for f in data["fallback_nodes"]}
    assert reasons == {"TVM could not compile its segment: TVM's build did not finish in 2 s"}
    assert data["outputs_match"] is True


def test_qkv_attention_gets_fewer_kernels_and_less_traffic_than_fuseops(save, tmp_path):
    data = compile_model(save(attention()), CompileConfig(str(tmp_path / "o"), **FAST)).to_dict()
    fusion = data["fusion"]
    stages = {s["name"]: s for s in fusion["stages"]}
    assert stages["horizontal"]["accepted"] and stages["horizontal"]["rewrites"] == 1
    assert fusion["kernel_count"] < fusion["kernel_count_fuseops"]
    assert fusion["traffic_bytes"] < fusion["traffic_bytes_fuseops"]
    assert data["kernel_count"] == fusion["kernel_count"]
    merged = [k for k in data["kernels"] if {"q", "k", "v"} <= set(k["nodes"])]
    assert len(merged) == 1 and merged[0]["op_types"][0] == "MatMul"
    assert data["outputs_match"] is True
    assert all(b["rule"] and b["reason"] for b in fusion["boundaries"])


def test_a_rule_can_be_switched_off(save, tmp_path):
    config = CompileConfig(str(tmp_path / "o"), rules=(), **FAST)
    fusion = compile_model(save(attention()), config).to_dict()["fusion"]
    assert [s["name"] for s in fusion["stages"]] == ["unfused", "fuseops"]
    assert fusion["kernel_count"] == fusion["kernel_count_fuseops"]


def test_unknown_target_is_a_bad_input(save, tmp_path):
    with pytest.raises(EngineError) as error:
        compile_model(save(conv_relu_conv()), CompileConfig(str(tmp_path), target="tpu"))
    assert error.value.code == "bad_target"


def _cli(argv):
    return main([*argv, "--cache-dir", "none"])


def test_cli_prints_the_architecture_keys(save, tmp_path, capsys):
    path = save(conv_relu_conv())
    assert (
        _cli(
            [
                "compile",
                str(path),
                "--target",
                "host",
                "--threads",
                "1",
                "--out",
                str(tmp_path / "cli"),
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    for key in (
        "kernels",
        "tvm_nodes",
        "fallback_nodes",
        "latency_ms",
        "onnxruntime_latency_ms",
        "artifact",
        "outputs_match",
    ):
        assert key in data
    assert data["outputs_match"] is True


def test_cli_reports_a_missing_model_as_bad_input(tmp_path, capsys):
    assert _cli(["compile", str(tmp_path / "nope.onnx"), "--out", str(tmp_path), "--json"]) == 2
    assert capsys.readouterr().err.startswith("error: ")


@pytest.mark.parametrize(("group_size", "side"), [(34, 28), (68, 14)])
def test_grouped_pointwise_conv_gets_a_register_tile_and_stays_exact(
    save, tmp_path, group_size, side
):
    """ShuffleNet's grouped 1x1 convs (4 groups of 34 channels): the output channel reads
    the input only as ff // 34, so its rows share the input vector and get a tile."""
    channels = 4 * group_size
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="gconv", group=4),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    inits = [_random("w", (channels, group_size, 1, 1), 1), _random("b", (channels,), 2)]
    shape = [1, channels, side, side]
    model = build(nodes, [("x", shape)], [("y", shape)], inits)
    data = compile_model(save(model), CompileConfig(str(tmp_path / "out"), **FAST)).to_dict()
    assert data["outputs_match"] is True
    (kernel,) = data["kernels"]
    assert kernel["schedule"] == "tiled"


@pytest.mark.parametrize(("stride", "side"), [(1, 28), (2, 28), (1, 7)])
def test_depthwise_conv_runs_per_channel_and_stays_exact(save, tmp_path, stride, side):
    """A depthwise conv (MobileNet's 3x3, one group per channel) has no register reuse to
    tile for: it runs parallel over channels, padding and epilogue computed per channel."""
    channels = 24
    out_side = (side - 1) // stride + 1
    nodes = [
        helper.make_node(
            "Conv",
            ["x", "w", "b"],
            ["c"],
            name="dw",
            group=channels,
            pads=[1, 1, 1, 1],
            strides=[stride, stride],
        ),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    inits = [_random("w", (channels, 1, 3, 3), 1), _random("b", (channels,), 2)]
    model = build(
        nodes,
        [("x", [1, channels, side, side])],
        [("y", [1, channels, out_side, out_side])],
        inits,
    )
    data = compile_model(save(model), CompileConfig(str(tmp_path / "out"), **FAST)).to_dict()
    assert data["outputs_match"] is True
    (kernel,) = data["kernels"]
    assert kernel["schedule"] == "per-channel"


def test_a_build_runs_on_as_many_threads_as_asked_and_leaves_every_core_free(save, tmp_path):
    """TVM would cap its pool at half the logical cores on x86 (one thread on 2 vCPUs).
    And its thread pool would pin the calling thread to one core; onnxruntime sessions
    created after it (fallback segments, the comparison, the next profile in a worker)
    would then run all their threads on that core."""
    import os

    before = os.sched_getaffinity(0)
    wanted = min(2, len(before))
    config = CompileConfig(str(tmp_path / "out"), **{**FAST, "threads": wanted})
    compile_model(save(conv_relu_conv()), config)
    assert tvm.get_global_func("runtime.NumThreads")() == wanted
    assert os.sched_getaffinity(0) == before


def test_a_decomposed_layer_norm_compiles_to_fewer_kernels_than_fuseops(save, tmp_path):
    from test_fusion_rules import decomposed_layer_norm

    model = decomposed_layer_norm(13)
    data = compile_model(save(model), CompileConfig(str(tmp_path / "o"), **FAST)).to_dict()
    fusion = data["fusion"]
    stages = {s["name"]: s for s in fusion["stages"]}
    assert stages["layer-norm"]["accepted"] and stages["layer-norm"]["rewrites"] == 1
    assert fusion["kernel_count"] < fusion["kernel_count_fuseops"]
    assert fusion["traffic_bytes"] < fusion["traffic_bytes_fuseops"]
    assert data["outputs_match"] is True
    # every node of the pattern is accounted for in a kernel
    names = {n for k in data["kernels"] for n in k["nodes"]}
    assert {"mean", "variance", "sqrt", "normalize", "shift"} <= names


def test_an_import_that_raises_leaves_no_block_open(capfd):
    """A node the frontend cannot convert ends the import; the builder it leaves is
    collected without "BlockBuilder destroyed with remaining blocks!" on stderr."""
    import gc

    from onnx import TensorProto

    from engine.fusion.importer import NodeImportError, import_onnx
    from engine.fusion.preparation import dtypes

    # the frontend converts the Relu, then refuses the Pad's mode half-way through
    pads = helper.make_tensor("p", TensorProto.INT64, [8], [0, 0, 1, 1, 0, 0, 1, 1])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Pad", ["r", "p"], ["y"], name="pad", mode="wrap"),
    ]
    model = build(nodes, [("x", [1, 4, 4, 4])], [("y", None)], [pads])
    capfd.readouterr()
    with pytest.raises(NodeImportError, match="'pad' \\(Pad\\)"):
        import_onnx(model, {}, dtypes(model))
    gc.collect()
    assert "remaining blocks" not in capfd.readouterr().err
