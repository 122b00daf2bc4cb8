"""Kernels for the shapes real exports have: windows wider than their input (EfficientNet's
pooler), extents no tile divides (ViT's 197 tokens), and the runner's hand-over of arrays
to TVM without copies."""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from engine.fusion import CompileConfig, compile_model
from engine.fusion.importer import prepare
from engine.fusion.standalone import CompiledModel, aligned


def _model(nodes, inputs, output, initializers=()):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)],
        list(initializers),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    return onnx.shape_inference.infer_shapes(model)


def _pool(kernel, ceil_mode, op="AveragePool", **extra):
    return _model(
        [
            helper.make_node(
                op,
                ["x"],
                ["y"],
                name="pool",
                kernel_shape=kernel,
                strides=kernel,
                ceil_mode=ceil_mode,
                **extra,
            )
        ],
        [("x", [1, 8, 7, 7])],
        "y",
    )


def _op_types(model):
    return [n.op_type for n in prepare(model).graph.node]


@pytest.mark.parametrize(
    ("kernel", "ceil_mode", "op", "expected"),
    [
        ([640, 640], 1, "AveragePool", "GlobalAveragePool"),  # transformers' EfficientNet
        ([7, 7], 0, "AveragePool", "GlobalAveragePool"),
        ([7, 7], 0, "MaxPool", "GlobalMaxPool"),
        ([640, 640], 0, "AveragePool", "AveragePool"),  # floor mode: no output position
        ([3, 3], 1, "AveragePool", "AveragePool"),  # windows over part of the input
    ],
)
def test_a_pool_over_its_whole_input_becomes_the_global_pool(kernel, ceil_mode, op, expected):
    assert _op_types(_pool(kernel, ceil_mode, op)) == [expected]


def test_a_pool_whose_input_shape_is_unknown_stays_as_it_is():
    model = _pool([640, 640], 1)
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "h"
    del model.graph.value_info[:]
    assert _op_types(model) == ["AveragePool"]


def test_a_padded_pool_stays_as_it_is():
    assert _op_types(_pool([7, 7], 0, pads=[1, 1, 1, 1])) == ["AveragePool"]


def test_the_global_pool_computes_what_onnxruntime_computes(tmp_path):
    model = _pool([640, 640], 1, count_include_pad=1)
    result = compile_model(
        model, CompileConfig(out_dir=str(tmp_path), choose_backends=False, timing_window_s=0.2)
    )
    assert result.backend == "tvm"
    assert result.outputs_match
    [kernel] = result.kernels
    assert kernel.time_us is not None


@pytest.mark.parametrize(
    ("op", "strides", "extra"),
    [
        ("MaxPool", [1, 1], {}),  # GoogLeNet's branch pool, on a concat's NCHW output
        ("MaxPool", [2, 2], {}),  # strided: the columns stay scalar
        ("AveragePool", [1, 1], {"count_include_pad": 0}),
    ],
)
def test_a_padded_pool_over_nchw_planes_pads_each_plane_once(op, strides, extra, tmp_path):
    """A padded 3x3 pool in NCHW runs plane by plane, each plane's padded copy made inside
    the parallel loop: inlined, the bounds check sat on every lane of every window step
    (128x28x28: 361 us, onnxruntime 34, ours now 23). Exact against onnxruntime."""
    model = _model(
        [
            helper.make_node(
                op,
                ["x"],
                ["y"],
                name="pool",
                kernel_shape=[3, 3],
                strides=strides,
                pads=[1, 1, 1, 1],
                **extra,
            )
        ],
        [("x", [1, 6, 28, 28])],
        "y",
    )
    result = compile_model(
        model, CompileConfig(out_dir=str(tmp_path), choose_backends=False, timing_window_s=0.2)
    )
    assert result.backend == "tvm"
    assert result.outputs_match
    assert [k.schedule for k in result.kernels] == ["plane"]


def test_a_squeeze_excite_mean_in_channel_blocks_sums_in_vector_lanes(tmp_path):
    """A mean over a blocked activation's 16x16 positions (a squeeze-excite's pool) sums a
    vector of channels per step in registers, not a scalar loop per channel strided by the
    block (EfficientNet-B0's first, 32 channels at 112x112: 232 -> 63 us). Exact."""
    rng = np.random.default_rng(0)
    weight = helper.make_tensor(
        "w", TensorProto.FLOAT, [32, 16, 1, 1], rng.standard_normal(512).astype(np.float32)
    )
    model = _model(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
            helper.make_node("ReduceMean", ["c"], ["y"], name="se_pool", axes=[2, 3]),
        ],
        [("x", [1, 16, 16, 16])],
        "y",
        [weight],
    )
    model.opset_import[0].version = 17  # axes as an attribute
    result = compile_model(
        model,
        CompileConfig(
            out_dir=str(tmp_path),
            choose_backends=False,
            conv_layout="blocked",
            timing_window_s=0.2,
        ),
    )
    assert result.outputs_match
    [mean] = [k for k in result.kernels if "se_pool" in k.nodes]
    assert mean.schedule == "window"


def _attention_scores(tokens: int, heads: int = 2, width: int = 64):
    """Q @ K^T * scale, as a ViT's attention computes it at ``tokens`` tokens."""
    scale = helper.make_tensor("scale", TensorProto.FLOAT, [], [0.125])
    return _model(
        [
            helper.make_node("MatMul", ["q", "k"], ["s"], name="scores"),
            helper.make_node("Mul", ["s", "scale"], ["y"], name="scaled"),
        ],
        [("q", [1, heads, tokens, width]), ("k", [1, heads, width, tokens])],
        "y",
        [scale],
    )


@pytest.mark.parametrize("tokens", [197, 50])
def test_a_matmul_no_tile_divides_is_tiled_on_padded_operands(tokens, tmp_path):
    result = compile_model(
        _attention_scores(tokens),
        CompileConfig(out_dir=str(tmp_path), choose_backends=False, timing_window_s=0.2),
    )
    assert result.outputs_match
    assert {k.schedule for k in result.kernels if "matmul" in k.func} == {"tiled"}


def test_padding_keeps_the_epilogue_inside_the_output(tmp_path):
    """The un-padding copy must not be inlined over the padded tile: it wrote past the
    output's end and corrupted the heap."""
    from tvm import te

    from engine.fusion.schedules import CpuScheduleConfig, schedule_cpu

    q = te.placeholder((1, 2, 197, 64), name="q")
    k = te.placeholder((1, 2, 64, 197), name="k")
    r = te.reduce_axis((0, 64), "r")
    scores = te.compute(
        (1, 2, 197, 197), lambda b, h, i, j: te.sum(q[b, h, i, r] * k[b, h, r, j], axis=r)
    )
    scaled = te.compute((1, 2, 197, 197), lambda *i: scores(*i) * 0.125, name="scaled")
    scheduled, kind = schedule_cpu(
        te.create_prim_func([q, k, scaled]), CpuScheduleConfig(vector_lanes=16)
    )
    assert kind == "tiled"
    text = scheduled.script()
    assert "_pad" in text
    import tvm

    built = tvm.compile(scheduled, target="llvm")
    rng = np.random.default_rng(0)
    qv = rng.standard_normal((1, 2, 197, 64)).astype("float32")
    kv = rng.standard_normal((1, 2, 64, 197)).astype("float32")
    out = _fenced_call(built, [qv, kv], (1, 2, 197, 197))
    np.testing.assert_allclose(out, qv @ kv * 0.125, rtol=1e-4, atol=1e-4)


def _fenced_call(built, inputs: list, shape: tuple) -> np.ndarray:
    """``built(*inputs, out)`` with ``out`` of ``shape`` followed in memory by a fence of
    4096 sevens: the fence must come back untouched (a padded or predicated tile that
    stored past the output's end would change it). The output, as an array."""
    import tvm

    size = int(np.prod(shape))
    memory = aligned(np.full(size + 4096, 7.0, dtype="float32"))
    out = tvm.runtime.from_dlpack(memory[:size].reshape(shape))
    built(*(tvm.runtime.tensor(v) for v in inputs), out)
    assert (memory[size:] == 7.0).all()
    return out.numpy()


@pytest.mark.parametrize("lanes", [8, 16])
def test_rows_no_tile_divides_are_padded_not_predicated(lanes):
    """197 rows by 64 whole lanes: the rows' tile does not divide 197, so the rows are
    padded (a predicated row guarded every step of the reduction: 2.4x slower on AVX2);
    the bias after the product still lands exactly in the unpadded output."""
    import tvm
    from tvm import te

    from engine.fusion.schedules import CpuScheduleConfig, schedule_cpu

    x = te.placeholder((197, 64), name="x")
    w = te.placeholder((64, 64), name="w")
    bias = te.placeholder((64,), name="bias")
    r = te.reduce_axis((0, 64), "r")
    product = te.compute((197, 64), lambda i, j: te.sum(x[i, r] * w[r, j], axis=r))
    out_t = te.compute((197, 64), lambda i, j: product[i, j] + bias[j], name="biased")
    config = CpuScheduleConfig(vector_lanes=lanes, vector_registers=32 if lanes == 16 else 16)
    scheduled, kind = schedule_cpu(te.create_prim_func([x, w, bias, out_t]), config)
    assert kind == "tiled"
    assert "_pad" in scheduled.script()
    built = tvm.compile(scheduled, target="llvm")
    rng = np.random.default_rng(0)
    xv, wv, bv = (rng.standard_normal(s).astype("float32") for s in ((197, 64), (64, 64), (64,)))
    out = _fenced_call(built, [xv, wv, bv], (197, 64))
    np.testing.assert_allclose(out, xv @ wv + bv, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("window", [1, 3])
def test_a_lone_reduction_loop_is_unrolled_by_four_and_stays_exact(window):
    """A 1x1 conv's channel loop (a matmul's K) has the body of one step: it is unrolled
    by 4; a conv with a window keeps its loops as they are."""
    from tvm import te

    from engine.fusion.lowering import _conv_window_inside
    from engine.fusion.schedules import CpuScheduleConfig, schedule_cpu

    data = te.placeholder((1, 2, 9, 9, 16), name="data")
    kernel = te.placeholder((2, 2, 16, window, window, 16), name="kernel")
    pad = window // 2
    conv = _conv_window_inside(data, kernel, [1, 1], [pad] * 4, [1, 1], "float32")
    scheduled, kind = schedule_cpu(te.create_prim_func([data, kernel, conv]), CpuScheduleConfig(16))
    assert kind == "tiled"
    text = scheduled.script()
    assert ("T.unroll(4)" in text) == (window == 1)
    _assert_blocked_conv_exact(scheduled, 2, 9, window, 1e-4)


def _assert_blocked_conv_exact(scheduled, chunks: int, size: int, window: int, tol: float):
    """Run ``scheduled``, a stride-1 same-padded conv of ``chunks`` input blocks of 16 into
    two output blocks of 16 on a ``size`` x ``size`` plane (NCHW16c, weights with the
    window inside the input block), on random values; compare with numpy."""
    import tvm

    pad = window // 2
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, chunks, size, size, 16)).astype("float32")
    w = rng.standard_normal((2, chunks, 16, window, window, 16)).astype("float32")
    out = tvm.runtime.tensor(np.zeros((1, 2, size, size, 16), "float32"))
    tvm.compile(scheduled, target="llvm")(tvm.runtime.tensor(x), tvm.runtime.tensor(w), out)
    xp = np.pad(x, [(0, 0), (0, 0), (pad, pad), (pad, pad), (0, 0)])
    expected = np.zeros((1, 2, size, size, 16), "float32")
    for kh in range(window):
        for kw in range(window):
            patch = xp[0, :, kh : kh + size, kw : kw + size, :]  # [ic chunk, h, w, ic]
            expected[0] += np.einsum("chwi,kcio->khwo", patch, w[:, :, :, kh, kw, :])
    np.testing.assert_allclose(out.numpy(), expected, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    ("window", "registers", "blocked"),
    [(1, 16, True), (3, 16, True), (1, 32, False), (3, 32, False)],
)
def test_a_conv_over_a_small_plane_reduces_in_channel_blocks_on_avx2(window, registers, blocked):
    """On a target with 16 vector registers (AVX2), a blocked conv over a 7x7 plane runs
    its input channels in blocks, each over all the register tiles of a thread's share
    (the block's weights stay in L1); on AVX-512 (32 registers) each tile runs its whole
    reduction as before. Exact either way."""
    from tvm import te

    from engine.fusion.lowering import _conv_window_inside
    from engine.fusion.schedules import CpuScheduleConfig, schedule_cpu

    channels, pad = 256 if window == 1 else 64, window // 2
    data = te.placeholder((1, channels // 16, 7, 7, 16), name="data")
    kernel = te.placeholder((2, channels // 16, 16, window, window, 16), name="kernel")
    conv = _conv_window_inside(data, kernel, [1, 1], [pad] * 4, [1, 1], "float32")
    config = CpuScheduleConfig(8 if registers == 16 else 16, vector_registers=registers)
    scheduled, kind = schedule_cpu(te.create_prim_func([data, kernel, conv]), config)
    assert kind == "tiled"
    text = scheduled.script()
    # a channel-block loop outside the row tiles' loop, the block's channels inside it
    assert bool(re.search(r"for ic_\w+, .*\bow_0\b.*, ic_\w+", text)) == blocked
    _assert_blocked_conv_exact(scheduled, channels // 16, 7, window, 1e-3)


@pytest.mark.parametrize(
    ("width", "stride", "window", "lanes", "columns"),
    [
        (12, 1, 3, 16, 4),  # four columns divide the width
        (14, 1, 3, 16, 2),  # four do not: two
        (7, 1, 3, 16, 7),  # a 7x7 plane: all seven
        (14, 2, 5, 16, 7),  # EfficientNet's 5x5 stride 2 (7 wide out)
        (13, 1, 3, 16, 1),  # a prime width: one column, still in registers
        (12, 1, 3, 8, 4),  # AVX2: 8 lanes, the block in two registers, 4 x 2 sums of 12
    ],
)
def test_a_blocked_depthwise_conv_is_a_register_tile_with_its_epilogue(
    width, stride, window, lanes, columns
):
    """A depthwise conv in channel blocks keeps a tile of output columns x the whole block
    in registers while its window's loops run, and applies its bias and ReLU6 as the tile
    is written back (MobileNetV2's first, 32 channels at 112x112: 92 -> 54 us, AMD EPYC
    Zen 4). Exact."""
    import tvm
    from tvm import te, topi

    from engine.fusion.lowering import _depthwise_blocked
    from engine.fusion.schedules import CpuScheduleConfig, schedule_cpu

    block, pad = 32 if lanes == 16 else 16, window // 2
    data = te.placeholder((1, 2, width, width, block), name="data")
    kernel = te.placeholder((2, 1, window, window, 1, block), name="kernel")
    bias = te.placeholder((1, 2, 1, 1, block), name="bias")
    conv = _depthwise_blocked(data, kernel, [stride] * 2, [pad] * 4, [1, 1], "float32")
    relu6 = topi.minimum(topi.maximum(topi.add(conv, bias), 0.0), 6.0)
    config = CpuScheduleConfig(lanes, vector_registers=32 if lanes == 16 else 16)
    scheduled, kind = schedule_cpu(te.create_prim_func([data, kernel, bias, relu6]), config)
    assert kind == "window"
    text = scheduled.script()
    assert '"local"' in text  # the sums in a tile, not in the output
    assert f"T.unroll({columns})" in text or columns == 1
    assert f"T.unroll({block // lanes})" in text
    assert 'T.sblock("T_' not in text  # no epilogue block of its own: in the write-back
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, width, width, block)).astype("float32")
    w = rng.standard_normal((2, 1, window, window, 1, block)).astype("float32")
    b = rng.standard_normal((1, 2, 1, 1, block)).astype("float32")
    out_w = (width + 2 * pad - window) // stride + 1
    out = tvm.runtime.tensor(np.zeros((1, 2, out_w, out_w, block), "float32"))
    tvm.compile(scheduled, target="llvm")(*(tvm.runtime.tensor(a) for a in (x, w, b)), out)
    xp = np.pad(x, [(0, 0), (0, 0), (pad, pad), (pad, pad), (0, 0)])
    expected = np.zeros((1, 2, out_w, out_w, block), "float32")
    span = (out_w - 1) * stride + 1
    for kh in range(window):
        for kw in range(window):
            patch = xp[:, :, kh : kh + span : stride, kw : kw + span : stride, :]
            expected += patch * w[:, 0, kh, kw, 0, :][None, :, None, None, :]
    expected = np.clip(expected + b, 0.0, 6.0)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("data_shape", "kernel_shape", "parallel"),
    [
        # the input (200 KB) is the larger: rows outermost, the output chunk inside them
        ((1, 4, 28, 28, 16), (4, 4, 16, 1, 1, 16), "n_oh_oc_chunk_0_ow_0_fused"),
        # the weights (1 MB) are the larger: their chunk outermost, as before
        ((1, 32, 7, 7, 16), (32, 32, 16, 1, 1, 16), "n_oc_chunk_0_oh_oc_block_0_fused"),
    ],
)
def test_the_larger_operands_loops_go_outermost(data_shape, kernel_shape, parallel):
    """The operand read from memory once is the larger one. A 1x1 conv's input larger than
    its weights: each thread takes a band of rows and every output chunk passes by (the
    chunk outermost streamed the whole input once per chunk: ResNet-50's 256 -> 64 at 56x56
    ran 1.04-1.42 ms against 0.94-0.96, AVX2, 2 threads). Exact either way."""
    import tvm
    from tvm import te

    from engine.fusion.lowering import _conv_window_inside
    from engine.fusion.schedules import CpuScheduleConfig, schedule_cpu

    data = te.placeholder(data_shape, name="data")
    kernel = te.placeholder(kernel_shape, name="kernel")
    conv = _conv_window_inside(data, kernel, [1, 1], [0] * 4, [1, 1], "float32")
    scheduled, kind = schedule_cpu(te.create_prim_func([data, kernel, conv]), CpuScheduleConfig(16))
    assert kind == "tiled"
    assert f"for {parallel} in T.parallel(" in scheduled.script()
    rng = np.random.default_rng(0)
    x = rng.standard_normal(data_shape).astype("float32")
    w = rng.standard_normal(kernel_shape).astype("float32")
    out_shape = (1, kernel_shape[0], *data_shape[2:4], 16)
    out = tvm.runtime.tensor(np.zeros(out_shape, "float32"))
    tvm.compile(scheduled, target="llvm")(tvm.runtime.tensor(x), tvm.runtime.tensor(w), out)
    expected = np.einsum("chwi,kcio->khwo", x[0], w[:, :, :, 0, 0, :])[None]
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("data_shape", "kernel_shape", "fanned"),
    [
        # one register of 16 output channels, 9 chunks: three chunks join the 8 rows' tile
        ((1, 1, 8, 8, 16), (9, 1, 16, 1, 1, 16), "for oc_chunk_1 in T.unroll(3):"),
        # half a register (24 channels in blocks of 8): its 3 chunks join
        ((1, 2, 8, 8, 16), (3, 2, 16, 1, 1, 8), "for oc_chunk_1 in T.unroll(3):"),
        # two registers wide (blocks of 32) already hold 14 sums: no chunk joins
        ((1, 2, 8, 8, 32), (4, 2, 32, 1, 1, 32), None),
    ],
)
def test_a_tile_one_register_wide_takes_several_output_chunks(data_shape, kernel_shape, fanned):
    """A blocked conv whose tile is one register wide computes several output-channel chunks
    per input broadcast (16 -> 144 channels at 56x56: 83-95 -> 58-65 us, AVX-512); one two
    registers wide keeps its tile. Exact either way."""
    import tvm
    from tvm import te

    from engine.fusion.lowering import _conv_window_inside
    from engine.fusion.schedules import CpuScheduleConfig, schedule_cpu

    data = te.placeholder(data_shape, name="data")
    kernel = te.placeholder(kernel_shape, name="kernel")
    conv = _conv_window_inside(data, kernel, [1, 1], [0] * 4, [1, 1], "float32")
    scheduled, kind = schedule_cpu(te.create_prim_func([data, kernel, conv]), CpuScheduleConfig(16))
    assert kind == "tiled"
    text = scheduled.script()
    if fanned:
        assert fanned in text
    else:
        assert "oc_chunk_1" not in text
    rng = np.random.default_rng(0)
    x = rng.standard_normal(data_shape).astype("float32")
    w = rng.standard_normal(kernel_shape).astype("float32")
    out_shape = (1, kernel_shape[0], *data_shape[2:4], kernel_shape[-1])
    out = tvm.runtime.tensor(np.zeros(out_shape, "float32"))
    tvm.compile(scheduled, target="llvm")(tvm.runtime.tensor(x), tvm.runtime.tensor(w), out)
    expected = np.einsum("chwi,kcio->khwo", x[0], w[:, :, :, 0, 0, :])[None]
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_a_matrix_vector_product_in_narrow_panels_keeps_several_sums_in_flight():
    """A classifier's 1000 outputs in panels of 8 (no wider tile divides 1000): five panels
    per step, five sums in flight instead of one register every FMA waits on (EfficientNet-
    B0's 1280 -> 1000: 120-143 -> 96-110 us, AVX-512, 2 threads). Exact."""
    import tvm
    from tvm import te

    from engine.fusion.schedules import CpuScheduleConfig, schedule_cpu

    data = te.placeholder((1, 64), name="data")
    panels = te.placeholder((125, 64, 8), name="panels")
    k = te.reduce_axis((0, 64), name="k")
    out = te.compute(
        (125, 1, 8),
        lambda p, i, j: te.sum(data[i, k] * panels[p, k, j], axis=k),
        name="matmul",
    )
    scheduled, kind = schedule_cpu(te.create_prim_func([data, panels, out]), CpuScheduleConfig(16))
    assert kind == "tiled"
    assert "in T.unroll(5):" in scheduled.script()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 64)).astype("float32")
    w = rng.standard_normal((125, 64, 8)).astype("float32")
    result = tvm.runtime.tensor(np.zeros((125, 1, 8), "float32"))
    tvm.compile(scheduled, target="llvm")(tvm.runtime.tensor(x), tvm.runtime.tensor(w), result)
    expected = np.einsum("ik,pkj->pij", x, w)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("lanes", "registers"), [(16, 7), (8, 8)])
def test_a_matrix_vector_product_no_register_divides_sums_in_whole_registers(lanes, registers):
    """A classifier of 100 classes (MobileNetV2 from transformers): 4 divides 100, 8 and 16
    do not. In registers of 4 lanes, one sum a tile, every FMA waited for the last: 1 x 1280
    x 100 with bias 18.6 us; whole registers, as many as the row fills (up to 8), the last
    one's lanes predicated: 4.5 us. Not padded (that copied the weight on every call), no
    store past the output's end, the bias in the write-back. Exact."""
    import tvm
    from tvm import te

    from engine.fusion.schedules import CpuScheduleConfig, schedule_cpu

    data = te.placeholder((1, 96), name="data")
    weight = te.placeholder((96, 100), name="weight")
    bias = te.placeholder((100,), name="bias")
    k = te.reduce_axis((0, 96), name="k")
    product = te.compute(
        (1, 100), lambda i, j: te.sum(data[i, k] * weight[k, j], axis=k), name="matmul"
    )
    out = te.compute((1, 100), lambda i, j: product[i, j] + bias[j], name="add")
    func = te.create_prim_func([data, weight, bias, out])
    scheduled, kind = schedule_cpu(func, CpuScheduleConfig(lanes))
    assert kind == "tiled"
    text = scheduled.script()
    assert "_pad" not in text and f"T.unroll({registers})" in text
    assert f"T.vectorized({lanes})" in text and "T.vectorized(4)" not in text
    assert 'T.sblock("add")' not in text  # the bias added in the write-back
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype("float32") for s in ((1, 96), (96, 100), (100,)))
    result = _fenced_call(tvm.compile(scheduled, target="llvm"), [x, w, b], (1, 100))
    np.testing.assert_allclose(result, x @ w + b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("rows", "widened"), [(50, True), (128, False)])
def test_a_product_over_few_rows_takes_two_vectors_of_columns(rows, widened):
    """ViT's 50 tokens make 5 register rows: a tile two registers wide holds 10 sums, too
    few to keep the FMA units busy, and takes two vectors of columns (20 sums); 128 rows
    make 8 rows of 16 sums and keep their tile (50 x 768 x 192: 45.7-46.7 -> 39-43 us,
    AVX-512, 2 threads). Exact either way."""
    import tvm
    from tvm import te

    from engine.fusion.schedules import CpuScheduleConfig, schedule_cpu

    a = te.placeholder((rows, 64), name="a")
    b = te.placeholder((64, 192), name="b")
    k = te.reduce_axis((0, 64), name="k")
    out = te.compute((rows, 192), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="mm")
    scheduled, kind = schedule_cpu(te.create_prim_func([a, b, out]), CpuScheduleConfig(16))
    assert kind == "tiled"
    assert ("for j_0_1 in T.unroll(2):" in scheduled.script()) == widened
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, 64)).astype("float32")
    w = rng.standard_normal((64, 192)).astype("float32")
    result = tvm.runtime.tensor(np.zeros((rows, 192), "float32"))
    tvm.compile(scheduled, target="llvm")(tvm.runtime.tensor(x), tvm.runtime.tensor(w), result)
    np.testing.assert_allclose(result.numpy(), x @ w, rtol=1e-4, atol=1e-4)


def test_an_rgb_inputs_padding_runs_row_by_row_and_stays_exact():
    """A stem conv's input padding (3 channels innermost: no vector fits) is parallel over
    its rows with the columns and channels nested inside, not one loop over every element
    whose index is divided back into five coordinates (97 of the stem's 451 us)."""
    import tvm
    from tvm import te

    from engine.fusion.lowering import _conv_window_inside
    from engine.fusion.schedules import CpuScheduleConfig, schedule_cpu

    data = te.placeholder((1, 1, 20, 20, 3), name="data")
    kernel = te.placeholder((1, 1, 3, 7, 7, 32), name="kernel")
    conv = _conv_window_inside(data, kernel, [2, 2], [3] * 4, [1, 1], "float32")
    scheduled, kind = schedule_cpu(te.create_prim_func([data, kernel, conv]), CpuScheduleConfig(16))
    assert kind == "tiled"
    text = scheduled.script()
    assert "for i0_i1_i2_fused in T.parallel(26):" in text  # the padded input's 26 rows
    assert "for i3, i4 in T.grid(26, 3):" in text
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 1, 20, 20, 3)).astype("float32")
    w = rng.standard_normal((1, 1, 3, 7, 7, 32)).astype("float32")
    out = tvm.runtime.tensor(np.zeros((1, 1, 10, 10, 32), "float32"))
    tvm.compile(scheduled, target="llvm")(tvm.runtime.tensor(x), tvm.runtime.tensor(w), out)
    xp = np.pad(x[0, 0], [(3, 3), (3, 3), (0, 0)])  # [h, w, ic]
    expected = np.zeros((10, 10, 32), "float32")
    for kh in range(7):
        for kw in range(7):
            patch = xp[kh : kh + 20 : 2, kw : kw + 20 : 2, :]
            expected += np.einsum("hwi,io->hwo", patch, w[0, 0, :, kh, kw, :])
    np.testing.assert_allclose(out.numpy()[0, 0], expected, rtol=1e-4, atol=1e-4)


def test_a_squeeze_excite_scale_is_computed_once_not_per_element_it_scales():
    """sigmoid(conv(pooled) + bias) of 32 values scales a 32x28x28 activation: the sigmoid
    runs once per channel in a block of its own, not again at each of the 25,088 elements
    (EfficientNet-B0's excite kernels, 2 threads, AMD EPYC Zen 4, the kernel alone: 481 ->
    168 us in all, the first 130 -> 22). A bias added to a full-size conv output, or a
    padded input a window reads, stays inlined. Exact."""
    import tvm
    from tvm import te, topi

    from engine.fusion.schedules import CpuScheduleConfig, schedule_cpu

    pooled = te.placeholder((1, 8), name="pooled")
    weight = te.placeholder((32, 8), name="weight")
    bias = te.placeholder((32,), name="bias")
    x = te.placeholder((1, 32, 28, 28), name="x")
    k = te.reduce_axis((0, 8), name="k")
    conv = te.compute((1, 32), lambda n, c: te.sum(pooled[n, k] * weight[c, k], axis=k))
    scale = topi.sigmoid(te.compute((1, 32), lambda n, c: conv[n, c] + bias[c], name="biased"))
    out = te.compute((1, 32, 28, 28), lambda n, c, h, w: x[n, c, h, w] * scale[n, c], name="scaled")
    func = te.create_prim_func([pooled, weight, bias, x, out])
    scheduled, _ = schedule_cpu(func, CpuScheduleConfig(16))
    text = scheduled.script()
    blocks = re.findall(r'T\.sblock\("(\w+)"\)', text)
    # the conv, the sigmoid in a block of its own over the 32 values (the bias, the same
    # 32 points, inlined into it) and the scaled activation
    assert blocks == ["root", "compute", "compute_1", "scaled"]
    assert "T.parallel(25088)" in text
    scaled = text[text.index('T.sblock("scaled")') :]
    assert "T.exp" not in scaled and "88.37" not in scaled  # no exp per element
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(shape).astype("float32") for shape in ([1, 8], [32, 8], [32])]
    arrays.append(rng.standard_normal((1, 32, 28, 28)).astype("float32"))
    got = tvm.runtime.tensor(np.zeros((1, 32, 28, 28), "float32"))
    tvm.compile(scheduled, target="llvm")(*[tvm.runtime.tensor(a) for a in arrays], got)
    p, w, b, xv = arrays
    expected = xv * (1 / (1 + np.exp(-(p @ w.T + b))))[:, :, None, None]
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("to_blocks", [True, False])
def test_a_layout_transform_is_copied_in_tiles_and_stays_exact(to_blocks):
    """Channel blocks to NCHW and back, as relax's layout_transform writes them (loops
    over the input, the output indexed): tiled, the vector along the written axis."""
    import tvm
    from tvm import relax

    from engine.fusion.schedules import CpuScheduleConfig, schedule_cpu

    shape = (1, 64, 12, 20) if to_blocks else (1, 2, 12, 20, 32)
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    builder = relax.BlockBuilder()
    with builder.function("main", [x]):
        index_map = (
            (lambda n, c, h, w: (n, c // 32, h, w, c % 32))
            if to_blocks
            else (lambda n, co, h, w, ci: (n, co * 32 + ci, h, w))
        )
        out = builder.emit(relax.op.layout_transform(x, index_map))
        builder.emit_func_output(out)
    mod = relax.transform.LegalizeOps()(builder.get())
    func = next(f for gv, f in mod.functions.items() if gv.name_hint != "main")
    before = func.script()
    scheduled, kind = schedule_cpu(func, CpuScheduleConfig(16))
    assert func.script() == before  # the schedule edits a copy, never the caller's function
    assert kind == "parallel"
    # the vector runs along the written axis: channels into blocks, the rows out of them
    lanes = 16 if to_blocks else 4
    assert f"T.vectorized(T.int64({lanes}))" in scheduled.script()
    value = np.random.default_rng(0).standard_normal(shape).astype("float32")
    expected = (
        value.reshape(1, 2, 32, 12, 20).transpose(0, 1, 3, 4, 2)
        if to_blocks
        else value.transpose(0, 1, 4, 2, 3).reshape(1, 64, 12, 20)
    )
    out = tvm.runtime.tensor(np.zeros(expected.shape, "float32"))
    built = tvm.compile(scheduled.with_attr("global_symbol", "main"), target="llvm")
    built(tvm.runtime.tensor(value), out)
    np.testing.assert_array_equal(out.numpy(), expected)


def test_a_rule_starts_from_a_fresh_copy_only_after_another_rule_edited_it(monkeypatch):
    """Rules that give up before their first step leave the copy for the next rule; a rule
    that edited the kernel and then failed leaves the next a fresh one."""
    from tvm import te, topi

    from engine.fusion import schedules

    data = te.placeholder((1, 8, 6, 6), name="data")
    func = te.create_prim_func([data, topi.nn.relu(data)])
    copies = []
    real = schedules._schedule
    monkeypatch.setattr(schedules, "_schedule", lambda f: copies.append(1) or real(f))
    _, kind = schedules.schedule_cpu(func, schedules.CpuScheduleConfig(16))
    assert kind == "parallel" and len(copies) == 1  # four rules gave up without a step

    def splits_then_fails(sch, config):
        loops = sch.get_loops(schedules._blocks(sch)[0])
        sch.split(loops[1], [None, 2])
        raise RuntimeError("gave up halfway")

    def sees_the_kernel_as_it_was(sch, config):
        loops = sch.get_loops(schedules._blocks(sch)[0])
        return len(loops) == 4 and schedules._edited(sch) is False

    copies.clear()
    monkeypatch.setattr(schedules, "_tiled", splits_then_fails)
    monkeypatch.setattr(schedules, "_window", sees_the_kernel_as_it_was)
    _, kind = schedules.schedule_cpu(func, schedules.CpuScheduleConfig(16))
    assert kind == "window" and len(copies) == 2


def _compiled(tmp_path):
    model = _attention_scores(50)
    compile_model(model, CompileConfig(out_dir=str(tmp_path), choose_backends=False, measure=False))
    return model, CompiledModel(tmp_path / "artifact", threads=1)


def test_the_runner_hands_aligned_arrays_over_and_keeps_earlier_outputs(tmp_path):
    model, compiled = _compiled(tmp_path)
    feeds = compiled.example_inputs(0)
    assert all(v.ctypes.data % 64 == 0 for v in feeds.values())
    first = compiled.run(feeds)["y"]
    kept = first.copy()
    other = {n: aligned(v * 2) for n, v in feeds.items()}
    second = compiled.run(other)["y"]
    np.testing.assert_array_equal(first, kept)  # a later run does not write into it
    np.testing.assert_allclose(second, kept * 4, rtol=1e-5, atol=1e-5)
    reference = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_allclose(first, reference, rtol=1e-4, atol=1e-4)


def test_the_runner_copies_arrays_tvm_cannot_take_as_they_are(tmp_path):
    _, compiled = _compiled(tmp_path)
    feeds = compiled.example_inputs(0)
    expected = compiled.run(feeds)["y"]
    shifted = {}
    for name, value in feeds.items():  # 4 bytes past an aligned start, and not C-ordered
        raw = np.empty(value.size + 16, dtype=value.dtype)
        start = (-raw.ctypes.data % 64) // value.itemsize + 1
        shifted[name] = raw[start : start + value.size].reshape(value.shape)
        shifted[name][...] = value
        assert shifted[name].ctypes.data % 64 != 0
    np.testing.assert_array_equal(compiled.run(shifted)["y"], expected)
    transposed = {n: np.asfortranarray(v) for n, v in feeds.items()}
    np.testing.assert_array_equal(compiled.run(transposed)["y"], expected)


@pytest.mark.parametrize("shape", [(), (0, 3), (5,), (2, 3, 4)])
def test_aligned_keeps_values_and_shape(shape):
    value = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    out = aligned(value)
    assert out.shape == value.shape and out.dtype == value.dtype
    np.testing.assert_array_equal(out, value)
    assert out.ctypes.data % 64 == 0 or out.nbytes == 0


def _row_model(kind: str):
    if kind == "softmax_masked":  # as transformers' BERT export writes its attention
        zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
        nodes = [
            helper.make_node("Softmax", ["x"], ["s"], name="softmax", axis=-1),
            helper.make_node("IsNaN", ["s"], ["nan"], name="isnan"),
            helper.make_node("Where", ["nan", "zero", "s"], ["y"], name="where"),
        ]
        return _model(nodes, [("x", [1, 2, 16, 64])], "y", [zero])
    if kind == "layer_norm":
        scale = helper.make_tensor("g", TensorProto.FLOAT, [96], list(np.linspace(0.5, 2, 96)))
        bias = helper.make_tensor("b", TensorProto.FLOAT, [96], list(np.linspace(-1, 1, 96)))
        nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], name="ln")]
        return _model(nodes, [("x", [1, 20, 96])], "y", [scale, bias])
    nodes = [helper.make_node("Softmax", ["x"], ["y"], name="softmax", axis=-1)]
    return _model(nodes, [("x", [1, 3, 20, 50])], "y")  # no vector width divides 50


@pytest.mark.parametrize("kind", ["softmax_masked", "layer_norm", "softmax_odd_width"])
def test_row_reductions_run_row_by_row_and_stay_exact(kind, tmp_path):
    result = compile_model(
        _row_model(kind),
        CompileConfig(out_dir=str(tmp_path), choose_backends=False, timing_window_s=0.2),
    )
    assert result.outputs_match, result.max_abs_error
    assert [k.schedule for k in result.kernels] == ["rows"]


@pytest.mark.parametrize("exponent", [2.0, 3.0, 0.5])
def test_a_small_integer_power_is_multiplies_and_stays_exact(exponent, tmp_path):
    """GPT-2's tanh GELU cubes its input: ``powf`` per element took 7x its matmul's time."""
    value = helper.make_tensor("p", TensorProto.FLOAT, [], [exponent])
    nodes = [
        helper.make_node("Abs", ["x"], ["a"], name="abs"),  # 0.5: a real root
        helper.make_node("Pow", ["a", "p"], ["y"], name="pow"),
    ]
    result = compile_model(
        _model(nodes, [("x", [4, 64])], "y", [value]),
        CompileConfig(out_dir=str(tmp_path), choose_backends=False, timing_window_s=0.2),
    )
    assert result.outputs_match, result.max_abs_error
    names = [k.func for k in result.kernels]
    assert any("power" in n for n in names) == (exponent == 0.5), names


def _fully_connected(rows_shape, k, n, seed=0, constant=False):
    """``x @ W + b`` then ReLU, W a weight of ``k`` x ``n`` (a Gemm with transB, as
    exporters write a Linear layer, for a 2-D ``x``; a MatMul otherwise); ``constant``: W
    from a Constant node, not an initializer."""
    rng = np.random.default_rng(seed)
    b = onnx.numpy_helper.from_array(rng.standard_normal(n).astype("float32"), "b")
    if len(rows_shape) == 1:
        w = rng.standard_normal((n, k)).astype("float32") * 0.05
        nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["h"], name="fc", transB=1)]
    else:
        w = rng.standard_normal((k, n)).astype("float32") * 0.05
        nodes = [
            helper.make_node("MatMul", ["x", "w"], ["m"], name="fc"),
            helper.make_node("Add", ["m", "b"], ["h"], name="bias"),
        ]
    nodes.append(helper.make_node("Relu", ["h"], ["y"], name="relu"))
    weight = onnx.numpy_helper.from_array(w, "w")
    if constant:
        nodes.insert(0, helper.make_node("Constant", [], ["w"], name="wc", value=weight))
        return _model(nodes, [("x", [*rows_shape, k])], "y", [b])
    return _model(nodes, [("x", [*rows_shape, k])], "y", [weight, b])


def _param_shapes(directory):
    shapes = []
    for params in directory.glob("artifact/**/*.params.npz"):
        with np.load(params) as stored:
            shapes += [tuple(stored[name].shape) for name in stored.files]
    return shapes


@pytest.mark.parametrize(
    ("rows_shape", "k", "n", "panels", "constant"),
    [
        ([1], 1024, 512, (4, 1024, 128), False),  # a batch-1 classifier layer
        ([1], 1024, 512, (4, 1024, 128), True),  # its weight a Constant (the zoo's light models)
        ([1, 3], 1024, 384, (3, 1024, 128), False),  # three rows: still weight-bound
        # a register tile's rows: panels one tile wide (a [K, N] slice of 32 columns sat
        # in one cache set: 2-2.5x on 768 x 3072 and 1024 x 1024 products)
        ([1, 8], 1024, 384, (12, 1024, 32), False),
        ([1, 8], 256, 384, None, False),  # a weight that stays in cache: left as it is
        ([1], 1024, 1000, (125, 1024, 8), False),  # an ImageNet classifier: 3.6 -> 0.65 ms
        ([1], 1024, 1001, None, False),  # no panel width divides 1001
    ],
)
def test_weight_bound_products_read_their_weights_in_panels(
    rows_shape, k, n, panels, constant, tmp_path
):
    model = _fully_connected(rows_shape, k, n, constant=constant)
    result = compile_model(
        model, CompileConfig(out_dir=str(tmp_path), choose_backends=False, measure=False)
    )
    assert result.backend == "tvm"
    shapes = _param_shapes(tmp_path)
    if panels is None:
        assert not any(len(s) == 3 for s in shapes), shapes
    else:
        assert panels in shapes, shapes  # packed once, at build time
    products = [k for k in result.kernels if "matmul" in k.func or "einsum" in k.func]
    assert {k.schedule for k in products} == {"tiled"}
    # the product's kernel is still the node's (the split prices it, the views show it)
    assert [k.nodes[:1] for k in products] == [["fc"]], [(k.func, k.nodes) for k in products]
    compiled = CompiledModel(tmp_path / "artifact", threads=2)
    feeds = compiled.example_inputs(5)
    reference = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_allclose(compiled.run(feeds)["y"], reference, rtol=1e-4, atol=1e-4)


def _mlp_epilogue(rows, k, n, seed=0):
    """``x @ W + b``, GELU in its Erf form (as torch.onnx writes it), plus a residual."""
    rng = np.random.default_rng(seed)
    w = onnx.numpy_helper.from_array((rng.standard_normal((k, n)) * 0.05).astype("float32"), "w")
    b = onnx.numpy_helper.from_array(rng.standard_normal(n).astype("float32"), "b")
    consts = [
        onnx.numpy_helper.from_array(np.array(v, "float32"), name)
        for name, v in (("s2", 2**0.5), ("one", 1.0), ("half", 0.5))
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="fc"),
        helper.make_node("Add", ["b", "m"], ["h"], name="bias"),
        helper.make_node("Div", ["h", "s2"], ["d"], name="div"),
        helper.make_node("Erf", ["d"], ["e"], name="erf"),
        helper.make_node("Add", ["e", "one"], ["e1"], name="add1"),
        helper.make_node("Mul", ["h", "e1"], ["g"], name="mul"),
        helper.make_node("Mul", ["g", "half"], ["gelu"], name="mulhalf"),
        helper.make_node("Add", ["gelu", "r"], ["y"], name="residual"),
    ]
    return _model(nodes, [("x", [1, rows, k]), ("r", [1, rows, n])], "y", [w, b, *consts])


@pytest.mark.parametrize(
    ("rows", "k", "n", "panels"),
    [
        (50, 192, 768, (24, 192, 32)),  # ViT's MLP: packed, its epilogue in its kernel
        (64, 1024, 256, (8, 1024, 32)),  # over 1 MB
        (197, 768, 192, None),  # narrow: its [K, N] tile was faster (0.28 against 0.37 ms)
        (16, 128, 512, None),  # few rows, small weight: left as it is
    ],
)
def test_a_panel_products_epilogue_stays_in_its_kernel(rows, k, n, panels, tmp_path):
    """The bias, the GELU and the residual after a panel product move before its reshape
    back to ``[rows, N]``, so they stay in the product's kernel (one pass over the output
    instead of two)."""
    model = _mlp_epilogue(rows, k, n)
    result = compile_model(
        model, CompileConfig(out_dir=str(tmp_path), choose_backends=False, measure=False)
    )
    shapes = _param_shapes(tmp_path)
    if panels is None:
        assert not any(len(s) == 3 for s in shapes), shapes
    else:
        assert panels in shapes, shapes
    computing = [k for k in result.kernels if not k.func.startswith("fused_reshape")]
    assert len(computing) == 1, [(k.func, k.nodes) for k in result.kernels]
    assert {"fc", "erf", "residual"} <= set(computing[0].nodes), computing[0].nodes
    compiled = CompiledModel(tmp_path / "artifact", threads=2)
    feeds = compiled.example_inputs(3)
    reference = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_allclose(compiled.run(feeds)["y"], reference, rtol=1e-4, atol=1e-4)


def test_an_op_that_varies_along_the_rows_stays_after_the_panel_products_reshape(tmp_path):
    """Only operands constant along the rows (a bias, a scalar) or of the product's own
    shape move onto its ``[rows, N / t, t]`` form: a per-row scale ``[1, rows, 1]`` stays
    where it was, and the result is still the model's."""
    rng = np.random.default_rng(1)
    w = onnx.numpy_helper.from_array(
        (rng.standard_normal((192, 768)) * 0.05).astype("float32"), "w"
    )
    b = onnx.numpy_helper.from_array(rng.standard_normal(768).astype("float32"), "b")
    model = _model(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"], name="fc"),
            helper.make_node("Add", ["m", "b"], ["h"], name="bias"),
            helper.make_node("Mul", ["h", "s"], ["y"], name="row_scale"),
        ],
        [("x", [1, 50, 192]), ("s", [1, 50, 1])],
        "y",
        [w, b],
    )
    result = compile_model(
        model, CompileConfig(out_dir=str(tmp_path), choose_backends=False, measure=False)
    )
    assert (24, 192, 32) in _param_shapes(tmp_path)
    product = next(k for k in result.kernels if "einsum" in k.func)
    assert "fc" in product.nodes and "row_scale" not in product.nodes, product.nodes
    compiled = CompiledModel(tmp_path / "artifact", threads=2)
    feeds = compiled.example_inputs(4)
    reference = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_allclose(compiled.run(feeds)["y"], reference, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("rows", "panels"), [(1, (3, 1024, 128)), (128, (12, 1024, 32))])
def test_a_product_that_is_the_models_output_is_packed_or_left_alone(rows, panels, tmp_path):
    """GPT-2's lm_head: the product is the graph's output, and the rewrite is handed the
    variable bound to it, not the call (it crashed the build of GPT-2 and ViT)."""
    rng = np.random.default_rng(0)
    w = onnx.numpy_helper.from_array(rng.standard_normal((1024, 384)).astype("float32"), "w")
    model = _model(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="lm_head")],
        [("x", [1, rows, 1024])],
        "y",
        [w],
    )
    result = compile_model(
        model, CompileConfig(out_dir=str(tmp_path), choose_backends=False, measure=False)
    )
    shapes = _param_shapes(tmp_path)
    assert panels in shapes, shapes
    assert [k.nodes for k in result.kernels if not k.func.startswith("fused_reshape")] == [
        ["lm_head"]
    ], [(k.func, k.nodes) for k in result.kernels]
    compiled = CompiledModel(tmp_path / "artifact", threads=1)
    feeds = compiled.example_inputs(2)
    reference = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_allclose(compiled.run(feeds)["y"], reference, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("cpu", "lanes", "registers"),
    [
        ("znver3", 8, 16),  # AMD EPYC Zen 3: AVX2, no AVX-512
        ("haswell", 8, 16),
        ("x86-64", 4, 16),  # SSE2 only
        ("skylake-avx512", 16, 32),
        ("sapphirerapids", 16, 32),
    ],
)
def test_vector_lanes_and_registers_come_from_the_cpus_features(cpu, lanes, registers):
    """LLVM says 512 bits for every x86 CPU with this wheel: AVX2 machines got AVX-512
    tiles, twice as many sums as they have registers."""
    import tvm

    from engine.fusion.schedules import vector_lanes, vector_registers

    target = tvm.target.Target({"kind": "llvm", "mcpu": cpu})
    assert (vector_lanes(target), vector_registers(target)) == (lanes, registers)


def test_a_tiles_sums_fit_in_the_registers_left_for_them():
    from engine.fusion.schedules import CpuScheduleConfig, _rows_and_lanes

    avx2, avx512 = CpuScheduleConfig(8, vector_registers=16), CpuScheduleConfig(16)
    # (span, extent, lanes, width, grouped) -> (lanes, rows)
    assert _rows_and_lanes(128, 128, 16, 8, False, avx2) == (16, 4)  # 8 sums, not 16
    assert _rows_and_lanes(56, 56, 16, 8, False, avx2) == (16, 4)
    # seven columns: 7 rows of one register, not an imperfect 6 rows of two
    assert _rows_and_lanes(7, 7, 16, 8, False, avx2) == (8, 7)
    assert _rows_and_lanes(13, 13, 16, 8, False, avx2) == (16, 6)  # no divisor: predicated
    # AVX-512's 32 registers keep the tiles as they were: 7 or 8 rows of two registers
    assert _rows_and_lanes(128, 128, 32, 16, False, avx512) == (32, 8)
    assert _rows_and_lanes(56, 56, 32, 16, False, avx512) == (32, 7)
    # no divisor (13, 17): every row in one whole tile of one register, where the sums fit
    # (AVX-512's 28); AVX2's 12 do not hold 13: the imperfect tile stays (above)
    assert _rows_and_lanes(13, 13, 32, 16, False, avx512) == (16, 13)
    assert _rows_and_lanes(17, 17, 32, 16, False, avx512) == (16, 17)
    assert _rows_and_lanes(29, 29, 32, 16, False, avx512) == (32, 7)  # 29 sums: too many
