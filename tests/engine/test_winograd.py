"""3x3 convs by Winograd's F(4x4, 3x3) in the blocked layout: the algebra, which convs take
it, and whole models against onnxruntime's outputs (edge tiles, padding on one side, a
conv whose output has two readers, a strided conv that stays direct)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from onnx_builders import build

from engine.fusion import CompileConfig, compile_model
from engine.fusion.conv_layout import BLOCKED
from engine.fusion.standalone import CompiledModel
from engine.fusion.winograd import (
    A_T,
    ALPHA,
    B_T,
    M_TILE,
    G,
    input_transform,
    output_transform,
    pays,
)


def _correlate(d, g):
    """Direct 3x3 correlation of a 6x6 tile: its 4x4 valid outputs."""
    return np.array(
        [[np.sum(d[i : i + 3, j : j + 3] * g) for j in range(M_TILE)] for i in range(M_TILE)]
    )


def test_the_matrices_compute_a_tile_of_the_correlation():
    rng = np.random.default_rng(0)
    for _ in range(5):
        d = rng.standard_normal((ALPHA, ALPHA))
        g = rng.standard_normal((3, 3))
        winograd = A_T @ ((G @ g @ G.T) * (B_T @ d @ B_T.T)) @ A_T.T
        np.testing.assert_allclose(winograd, _correlate(d, g), rtol=1e-10, atol=1e-10)


def test_which_convs_take_winograd():
    """16 tiles and more, unless U per tile is more than a megabyte (weight-bound); the
    sizes measured in ``winograd``'s table."""
    assert pays(1, 256, 256, 14, 14) and pays(1, 512, 512, 28, 28) and pays(1, 64, 64, 224, 224)
    assert pays(1, 128, 128, 13, 13)  # 16 tiles, the last row and column partly outside
    assert not pays(1, 512, 512, 14, 14)  # 2.4 MB of U per tile
    assert not pays(1, 256, 256, 8, 8) and not pays(1, 512, 512, 7, 7)  # 4 tiles
    assert pays(4, 256, 256, 8, 8)  # a batch of 4: 16 tiles
    assert not pays(1, 16, 64, 56, 56)  # 16 input channels
    # With 8 lanes (AVX2) direct convs are slower: U per tile is no limit there (512 x 14
    # by Winograd 4.86 ms against 8.52 direct, AMD EPYC Zen 3); the tile count still is.
    assert pays(1, 512, 512, 14, 14, lanes=8) and not pays(1, 512, 512, 14, 14, lanes=16)
    assert not pays(1, 512, 512, 7, 7, lanes=8) and not pays(1, 16, 64, 56, 56, lanes=8)


def test_the_transforms_are_specialized_per_shape_and_count_their_work():
    inputs, in_flops = input_transform((1, 2, 13, 13, 16), (4, 4), (1, 1))
    outputs, out_flops = output_transform((1, 2, 13, 13, 16), (4, 4), bias=True, relu=True)
    assert in_flops > 0 and out_flops > 0
    assert [[int(d) for d in p.ty.shape] for p in outputs.params] == [
        [36, 16, 32],
        [1, 2, 1, 1, 16],
        [1, 2, 13, 13, 16],
    ]
    assert [int(d) for d in inputs.params[0].ty.shape] == [1, 2, 13, 13, 16]
    assert "T.int32" not in outputs.script()  # no shape parameter left


def test_a_parsed_template_is_kept_for_the_next_process(tmp_path, monkeypatch):
    """TVM's parser takes seconds per template the first time in a process; the parsed
    function is kept on disk and the next process loads it. A damaged file is parsed
    again and replaced; ``none`` keeps nothing."""
    import tvm
    import tvm.script

    from engine.fusion import winograd

    monkeypatch.setenv(winograd.PARSE_CACHE_ENV, str(tmp_path / "parsed"))
    parse = tvm.script.from_source
    parsed = []

    def counted(*args, **kwargs):
        parsed.append(1)
        return parse(*args, **kwargs)

    monkeypatch.setattr(tvm.script, "from_source", counted)

    def fresh():  # as a new process would: the per-process cache emptied
        winograd._output_template.cache_clear()
        return output_transform((1, 2, 13, 13, 16), (4, 4), bias=True, relu=True)[0]

    first = fresh()
    (kept,) = (tmp_path / "parsed").glob("*.json")
    second = fresh()
    assert len(parsed) == 1  # loaded, not parsed
    tvm.ir.assert_structural_equal(first, second)
    assert tvm.ir.save_json(first) == tvm.ir.save_json(second)  # the build cache's key

    kept.write_text("{damaged")
    tvm.ir.assert_structural_equal(fresh(), first)
    assert len(parsed) == 2 and tvm.ir.load_json(kept.read_text()) is not None

    monkeypatch.setenv(winograd.PARSE_CACHE_ENV, "none")
    kept.unlink()
    fresh()
    assert len(parsed) == 3 and not list((tmp_path / "parsed").glob("*"))
    winograd._output_template.cache_clear()


def _weights(name, shape, seed, scale=0.2):
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype("float32"), name)


def _model(size=17):
    """Eligible: ``a`` (bias, ReLU after it, output 17x17: edge tiles), ``b`` (no pad on
    the bottom and right, no bias, its output read twice), ``d`` (pad 0). Not eligible:
    ``s`` (stride 2) and ``t`` (too few channels and tiles)."""
    conv = helper.make_node
    nodes = [
        conv("Conv", ["x", "wa", "ba"], ["ca"], name="a", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["ca"], ["ra"], name="relu_a"),
        conv("Conv", ["ra", "wb"], ["cb"], name="b", kernel_shape=[3, 3], pads=[1, 1, 0, 0]),
        helper.make_node("Relu", ["cb"], ["rb"], name="relu_b"),
        helper.make_node("Add", ["cb", "rb"], ["sb"], name="twice"),
        conv("Conv", ["sb", "wd", "bd"], ["cd"], name="d", kernel_shape=[3, 3]),
        conv("Conv", ["cd", "ws"], ["cs"], name="s", kernel_shape=[3, 3], strides=[2, 2]),
        conv("Conv", ["cs", "wt"], ["y"], name="t", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    ]
    inits = [
        _weights("wa", [64, 32, 3, 3], 0, 0.1),
        _weights("ba", [64], 1),
        _weights("wb", [64, 64, 3, 3], 2, 0.05),
        _weights("wd", [32, 64, 3, 3], 3, 0.05),
        _weights("bd", [32], 4),
        _weights("ws", [32, 32, 3, 3], 5, 0.1),
        _weights("wt", [8, 32, 3, 3], 6, 0.1),
    ]
    model = build(nodes, [("x", [1, 32, size, size])], [("y", None)], inits, opset=18)
    return onnx.shape_inference.infer_shapes(model)


def test_a_blocked_build_runs_3x3_convs_by_winograd_and_computes_what_onnxruntime_computes(
    tmp_path,
):
    model = _model()
    config = CompileConfig(
        out_dir=str(tmp_path), conv_layout=BLOCKED, choose_backends=False, measure=False
    )
    result = compile_model(model, config)
    assert result.backend == "tvm"
    inputs = [k for k in result.kernels if k.func.startswith("winograd_input")]
    outputs = [k for k in result.kernels if k.func.startswith("winograd_output")]
    assert len(inputs) == len(outputs) == 3  # a, b and d; s (stride 2) and t stay direct
    assert {k.schedule for k in inputs + outputs} == {"hand-written"}
    assert all(k.flops > 0 for k in inputs + outputs)  # their work is counted, not zero
    convs = [k for k in result.kernels if "conv2d" in k.func]
    assert len(convs) == 2
    covered = {n for k in result.kernels for n in k.nodes}
    assert {"a", "b", "d", "relu_a", "s", "t"} <= covered  # every node has its kernel
    # each transform runs its conv's node; the output transform its bias and ReLU too (it
    # carried only the ReLU's name, and the kernel split priced it apart from its conv)
    assert sorted(k.nodes for k in inputs) == [["a"], ["b"], ["d"]]
    assert sorted(k.nodes for k in outputs) == [["a", "relu_a"], ["b"], ["d"]]

    compiled = CompiledModel(tmp_path / "artifact", threads=1)
    feeds = compiled.example_inputs(3)
    ours = compiled.run(feeds)["y"]
    reference = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=2e-4)


@pytest.mark.parametrize("size", [13, 16])
def test_whole_tiles_and_the_smallest_output_compute_what_onnxruntime_computes(size, tmp_path):
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], name="c", kernel_shape=[3, 3])
    conv.attribute.extend([helper.make_attribute("pads", [1, 1, 1, 1])])
    relu = helper.make_node("Relu", ["c"], ["y"], name="r")
    inits = [_weights("w", [32, 32, 3, 3], 7, 0.1), _weights("b", [32], 8)]
    model = build([conv, relu], [("x", [1, 32, size, size])], [("y", None)], inits, opset=18)
    model = onnx.shape_inference.infer_shapes(model)
    config = CompileConfig(
        out_dir=str(tmp_path), conv_layout=BLOCKED, choose_backends=False, measure=False
    )
    result = compile_model(model, config)
    assert any(k.func.startswith("winograd_output") for k in result.kernels)
    compiled = CompiledModel(tmp_path / "artifact", threads=2)
    feeds = compiled.example_inputs(1)
    ours = compiled.run(feeds)["y"]
    reference = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=2e-4)


def test_the_vector_width_decides_a_weight_bound_conv(tmp_path):
    """352 channels at 16x16: 16 tiles and 1.1 MB of U per tile. Built for AVX-512 (16
    lanes) it stays direct; for AVX2 (Zen 3, 8 lanes) it takes Winograd, and computes
    what onnxruntime computes (AVX2 code runs on both kinds of machine here)."""
    from engine.fusion.target import TargetSpec

    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], name="c", kernel_shape=[3, 3])
    conv.attribute.extend([helper.make_attribute("pads", [1, 1, 1, 1])])
    relu = helper.make_node("Relu", ["c"], ["y"], name="r")
    inits = [_weights("w", [352, 352, 3, 3], 9, 0.05), _weights("b", [352], 10)]
    model = build([conv, relu], [("x", [1, 352, 16, 16])], [("y", None)], inits, opset=18)
    model = onnx.shape_inference.infer_shapes(model)
    assert not pays(1, 352, 352, 16, 16) and pays(1, 352, 352, 16, 16, lanes=8)
    for mcpu, expected in (("skylake-avx512", False), ("znver3", True)):
        spec = TargetSpec("host", "llvm", {"kind": "llvm", "mcpu": mcpu, "num-cores": 2}, 2, mcpu)
        config = CompileConfig(
            out_dir=str(tmp_path / mcpu),
            target_spec=spec,
            conv_layout=BLOCKED,
            choose_backends=False,
            measure=False,
        )
        result = compile_model(model, config)
        assert any(k.func.startswith("winograd_input") for k in result.kernels) is expected
    compiled = CompiledModel(tmp_path / "znver3" / "artifact", threads=2)
    feeds = compiled.example_inputs(1)
    reference = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_allclose(compiled.run(feeds)["y"], reference, rtol=1e-4, atol=5e-4)


# Run in a fresh process (a fault fails the test, not the session; a forked child of a
# process whose thread pool already ran would wait on it forever).
_GUARDED_RUN = """
import ctypes, mmap, sys
import numpy as np
import tvm
from engine.fusion.winograd import ALPHA, B_T, input_transform

shape, tiles = (1, 2, 13, 13, 16), (4, 4)
func, _ = input_transform(shape, tiles, (1, 1))
lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), "llvm")
# the input at the start of a mapping whose first page is made unreadable (PROT_NONE):
# a load before its first element faults
page, size = mmap.PAGESIZE, int(np.prod(shape)) * 4
region = mmap.mmap(-1, page + size, prot=mmap.PROT_READ | mmap.PROT_WRITE)
base = ctypes.addressof(ctypes.c_char.from_buffer(region))
assert ctypes.CDLL(None).mprotect(ctypes.c_void_p(base), page, 0) == 0
x = np.frombuffer(region, dtype=np.float32, count=size // 4, offset=page).reshape(shape)
x[...] = np.random.default_rng(0).standard_normal(shape)
v = tvm.runtime.tensor(np.zeros((ALPHA * ALPHA, 16, 32), "float32"))
lib["main"](tvm.runtime.from_dlpack(x), v)
# tile (0, 0) of channel block 0: B^T d B over the padded input's corner
d = np.pad(x[0, 0], [(1, 1), (1, 1), (0, 0)])[:ALPHA, :ALPHA]
expected = np.einsum("ai,ijc,bj->abc", B_T, d, B_T).reshape(ALPHA * ALPHA, 16)
sys.exit(0 if np.allclose(v.numpy()[:, 0, :16], expected, rtol=1e-4, atol=1e-4) else 2)
"""


def test_the_input_transform_reads_nothing_outside_its_input():
    """The padding's zeros are not loads: the kernel once loaded a row and a column before
    the input and masked the value, which faulted when the input started a mapping (VGG-19
    on an AMD EPYC)."""
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-c", _GUARDED_RUN], capture_output=True, text=True, timeout=300
    )
    assert run.returncode >= 0, f"the transform faulted: signal {-run.returncode}"
    assert run.returncode == 0, f"the transform's corner tile is wrong: {run.stderr[-2000:]}"


def test_the_parse_cache_keeps_the_most_recently_used_templates(tmp_path):
    import os

    from engine.fusion.winograd import _prune

    for k in range(5):
        path = tmp_path / f"{k}.json"
        path.write_text("{}")
        os.utime(path, (1000 + k, 1000 + k))
    os.utime(tmp_path / "0.json", (2000, 2000))  # the oldest, just used again
    _prune(tmp_path, keep=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0.json", "3.json", "4.json"]
