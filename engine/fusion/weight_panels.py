"""Weights of matrix-vector products stored in panels, packed once at build time.

A fully connected layer on one input row (AlexNet's and VGG's classifiers, any batch-1
``Gemm``) reads each weight once: its speed is the speed at which the weight streams from
memory. Stored ``[K, N]`` (output columns innermost, where the schedule vectorizes), a tile
of 128 columns reads 512 bytes of one row, then jumps a whole row (16 KB for N = 4096) to
the next: every read is on a new page, which the hardware prefetcher does not follow, and
the kernel waits on memory latency. AlexNet's 9216 x 4096 layer took 14.1 ms on one thread
against onnxruntime's 9-10 ms, and did not get faster on two.

Stored in panels ``[N / t, K, t]`` the tile's reads are one contiguous stream: the same
layer took 11.3 ms on one thread and 3.3 ms on two (TE kernel alone, this machine,
``bench/tvm_build_bench.py`` for whole models). This module rewrites such a product,
``matmul(x, W)`` with ``W`` a weight (a parameter or a constant) of static shape and ``x`` of fewer rows than a register
tile, into ``matmul(x, panels(W))`` over the panels (a batched product broadcasting ``x``)
and a transpose back; ``panels(W)`` depends on the weight alone, so LiftTransformParams
(for a parameter) or FoldConstant (for a constant: the bundled zoo models' weights)
computes it once at build time (``build.pretransform_weights``).

A product with a register tile's rows (GPT-2's vocabulary projection: 64 tokens by a
128 x 8192 weight) has the same trouble in cache, not in memory: a tile's 32 columns are
K lines ``4 N`` bytes apart, all in the same few cache sets when ``4 N`` is a multiple of
4 KB, and every row tile re-read them from L3 (in the model: 3.4 ms, onnxruntime 1.1 ms).
Such a product with a weight of 1 MB or more reads panels one tile wide,
``einsum(x, panels(W))`` into ``[rows, N / 32, 32]``, which is ``[rows, N]`` as it lies in
memory (a reshape, a view): 0.5 against 1.0-1.4 ms for 64 x 1024 x 1024, 1.3 against 3.0
for 64 x 768 x 3072 (the kernel alone, 2 threads, an Intel Xeon with AVX-512). Its bias
and activation then run as a kernel of their own (the reshape stands between), a pass
over the output that costs less than the panels save at that size (64 x 1024 x 1024 with
bias and ReLU: 1.0 against 1.3-1.4 ms); below 1 MB the gain is 0-15% and the pass would
eat it.
"""

from __future__ import annotations

import math

# Columns per panel: the widest that divides N wins. Eight for ImageNet's 1000 classes: a
# 4096 x 1000 classifier took 3.56 ms in [K, N] (its 128-column tiles predicated, their
# sums in memory), 0.65 ms in panels of 8 (onnxruntime 0.66; 1 thread).
PANEL_WIDTHS = (128, 64, 32, 16, 8)
MAX_ROWS = 6  # rows of x up to which a product is weight-bound (a register tile has 7)
MIN_WEIGHT_BYTES = 1 << 20  # below: the weight stays in cache between calls anyway
# Columns per panel of a product with a register tile's rows: one tile's lanes (two
# AVX-512 registers, four AVX2 ones), so the tile's K x 32 slice of the weight is 16 KB
# in a row. Read in [K, N], that slice is K lines 4 N bytes apart: GPT-2's 128 x 8192
# vocabulary projection puts all of them in one cache set, and every row tile re-read
# the slice from L3.
TILE_PANEL = 32


def panel_width(rows: int, k: int, n: int) -> int | None:
    """The panel width for a product of ``rows`` x ``k`` by ``k`` x ``n`` (float32), or
    None to leave it as it is."""
    if 4 * k * n < MIN_WEIGHT_BYTES:
        return None
    if rows > MAX_ROWS:
        return TILE_PANEL if n % TILE_PANEL == 0 and n > TILE_PANEL else None
    return next((t for t in PANEL_WIDTHS if n % t == 0 and n > t), None)


def pack_weight_panels(mod):
    """``mod`` with every weight-bound matmul of ``main`` reading its weight in panels."""
    import tvm
    from tvm import relax
    from tvm.relax.dpl import is_op, rewrite_call, wildcard

    main = mod["main"]
    if main.attrs is None or "num_input" not in main.attrs:
        return mod
    weights = set(main.params[int(main.attrs["num_input"]) :])
    pattern = is_op("relax.matmul")(wildcard(), wildcard())

    def rewrite(expr, matches):
        call = matches[pattern]  # ``expr`` can be the variable bound to it (GPT-2, ViT)
        if not isinstance(call, relax.Call) or len(call.args) != 2:
            return expr
        x, w = call.args
        if w not in weights and not isinstance(w, tvm.ir.GenericConst):
            return expr  # an activation: packing would cost a pass over it on every call
        x_shape, w_shape = _static_shape(x), _static_shape(w)
        if x_shape is None or w_shape is None or len(w_shape) != 2 or len(x_shape) < 1:
            return expr
        if str(w.ty.dtype) != "float32" or str(x.ty.dtype) != "float32":
            return expr
        k, n = w_shape
        if x_shape[-1] != k:
            return expr
        rows = math.prod(x_shape[:-1])
        t = panel_width(rows, k, n)
        if t is None:
            return expr
        panels = relax.op.layout_transform(w, index_map=lambda kk, nn: (nn // t, kk, nn % t))
        flat = relax.op.reshape(x, [rows, k])
        if rows > MAX_ROWS:  # register tiles over the rows, written straight in place
            product = relax.op.einsum((flat, panels), "mk,pkt->mpt")  # [rows, n / t, t]
            return relax.op.reshape(product, [*x_shape[:-1], n])
        product = relax.op.matmul(flat, panels)  # [n / t, rows, t]
        columns = relax.op.permute_dims(product, [1, 0, 2])  # [rows, n / t, t]
        return relax.op.reshape(columns, [*x_shape[:-1], n])

    updated = tvm.IRModule(dict(mod.functions))
    updated["main"] = rewrite_call(pattern, rewrite, main)
    return updated


def _static_shape(expr) -> list[int] | None:
    try:
        return [int(d) for d in expr.ty.shape]
    except (TypeError, AttributeError):
        return None
