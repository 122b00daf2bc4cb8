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
for 64 x 768 x 3072 (the kernel alone, 2 threads, an Intel Xeon with AVX-512). The
elementwise ops after it (bias, activation, a residual) are moved before that reshape
(``sink_panel_reshapes``), so FuseOps keeps them in the product's kernel; with them fused,
panels pay from 256 KB on products at least 256 columns wide (see ``TILE_MIN_COLUMNS``).
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
# Smaller products read panels too, their epilogue fused (``sink_panel_reshapes``), when
# their weight is at least 256 KB, at least 256 columns wide, and at least 32 rows read it.
# Model shapes, bias and GELU or a residual included, 2 threads, median of 7 rounds,
# panels against [K, N] (ms): ViT's MLP 50 x 192 x 768 0.127/0.140, 197 x 192 x 768
# 0.41/0.54, Swin's 49 x 192 x 768 0.09/0.15, BERT's 128 x 128 x 512 0.146/0.171 and
# 64 x 1024 x 256 0.22/0.27. Narrower or smaller ones lost: 197 x 768 x 192 0.37/0.28,
# 128 x 512 x 128 0.128/0.083, 128 x 128 x 384 0.101/0.090, 16 x 128 x 512 0.037/0.030.
TILE_MIN_WEIGHT_BYTES = 256 << 10
TILE_MIN_COLUMNS = 256
TILE_MIN_ROWS = 32
PANEL_PRODUCT = "mk,pkt->mpt"  # rows x K by panels [N / t, K, t] into [rows, N / t, t]


def panel_width(rows: int, k: int, n: int) -> int | None:
    """The panel width for a product of ``rows`` x ``k`` by ``k`` x ``n`` (float32), or
    None to leave it as it is."""
    if rows > MAX_ROWS:
        if n % TILE_PANEL or n <= TILE_PANEL:
            return None
        if 4 * k * n >= MIN_WEIGHT_BYTES:
            return TILE_PANEL
        wide = n >= TILE_MIN_COLUMNS and rows >= TILE_MIN_ROWS
        return TILE_PANEL if wide and 4 * k * n >= TILE_MIN_WEIGHT_BYTES else None
    if 4 * k * n < MIN_WEIGHT_BYTES:
        return None
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
        x_shape, w_shape = static_shape(x), static_shape(w)
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
        flat = x if x_shape == [rows, k] else relax.op.reshape(x, [rows, k])
        if rows > MAX_ROWS:  # register tiles over the rows, written straight in place
            product = relax.op.einsum((flat, panels), PANEL_PRODUCT)  # [rows, n / t, t]
            return relax.op.reshape(product, [*x_shape[:-1], n])
        product = relax.op.matmul(flat, panels)  # [n / t, rows, t]
        columns = relax.op.permute_dims(product, [1, 0, 2])  # [rows, n / t, t]
        return relax.op.reshape(columns, [*x_shape[:-1], n])

    updated = tvm.IRModule(dict(mod.functions))
    updated["main"] = sink_panel_reshapes(rewrite_call(pattern, rewrite, main))
    return updated


_UNARY = frozenset(
    {
        "relax.abs", "relax.clip", "relax.cos", "relax.erf", "relax.exp", "relax.negative",
        "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.nn.leakyrelu", "relax.nn.relu",
        "relax.nn.silu", "relax.sigmoid", "relax.sin", "relax.sqrt", "relax.tanh",
    }
)  # fmt: skip
_BINARY = frozenset(
    {
        "relax.add", "relax.divide", "relax.maximum", "relax.minimum", "relax.multiply",
        "relax.power", "relax.subtract",
    }
)  # fmt: skip


def sink_panel_reshapes(main):
    """``main`` with the elementwise ops after a panel product's reshape computed before
    it, on the product's ``[rows, N / t, t]`` result, so FuseOps puts them into the
    product's kernel (its epilogue) again.

    An op moves when every tensor it reads is either a moved value or varies along the
    last axis only (a bias ``[N]``, a scalar): the bias is read as ``[N / t, t]``, a
    reshape of a weight that LiftTransformParams computes once. Each moved value keeps its
    variable, bound to a reshape (a view) of its ``[rows, N / t, t]`` form, so every other
    use reads it as before; the reshapes nothing reads are removed.
    """
    from tvm import relax

    builder = relax.BlockBuilder()
    flat: dict = {}  # variable -> (its [rows, n / t, t] form, its own shape)
    products = set()  # variables bound to a panel product
    blocks = []
    changed = False
    for block in main.body.blocks:
        if not isinstance(block, relax.DataflowBlock):
            blocks.append(block)
            continue
        bindings = []
        for b in block.bindings:
            if not isinstance(b, relax.VarBinding):
                bindings.append(b)
                continue
            if (
                _op_name(b.value) == "relax.einsum"
                and str(b.value.attrs.subscripts) == PANEL_PRODUCT
            ):
                products.add(b.var)
            if _op_name(b.value) == "relax.reshape":
                source, shape = b.value.args[0], static_shape(b.var)
                if shape is not None and source in products:
                    flat[b.var] = (source, shape)
                elif shape is not None and source in flat and _same_rows(shape, flat[source][1]):
                    flat[b.var] = (flat[source][0], shape)  # [rows, N] as [1, rows, N]
                bindings.append(b)
                continue
            moved = _moved(b, flat, builder, relax)
            if moved is None:
                bindings.append(b)
                continue
            pre, value, shape = moved
            var = relax.DataflowVar(f"{b.var.name}_panels", value.ty)
            view = builder.normalize(relax.op.reshape(var, shape))
            bindings += [*pre, relax.VarBinding(var, value), relax.VarBinding(b.var, view)]
            flat[b.var] = (var, shape)
            changed = True
        blocks.append(type(block)(bindings))
    if not changed:
        return main
    body = relax.SeqExpr(blocks, main.body.body)
    func = relax.Function(main.params, body, main.ret_ty, main.is_pure, main.attrs)
    return relax.analysis.remove_all_unused(func)


def _moved(binding, flat, builder, relax):
    """``(bindings before, the value on the panel form, the result's shape)`` for a
    binding that reads a panel product before its reshape, or None."""
    value = binding.value
    name = _op_name(value)
    if name not in _UNARY and name not in _BINARY:
        return None
    shape = static_shape(binding.var)
    sources = [flat[a] for a in value.args if a in flat]
    if shape is None or not sources or any(s != shape for _, s in sources):
        return None  # not on a moved value, or broadcast to another shape
    panel_shape = static_shape(sources[0][0])
    if panel_shape is None or any(static_shape(v) != panel_shape for v, _ in sources):
        return None
    pre, args = [], []
    for a in value.args:
        if a in flat:
            args.append(flat[a][0])
        elif not isinstance(a.ty, relax.TensorType):
            args.append(a)  # an attribute given as a value (clip's bounds)
        else:
            along = _along_last_axis(a, shape, panel_shape, builder, relax)
            if along is None:
                return None
            pre += along[0]
            args.append(along[1])
    call = builder.normalize(relax.Call(value.op, args, value.attrs, value.ty_args))
    if static_shape(call) != panel_shape:
        return None
    return pre, call, shape


def _same_rows(shape: list[int], other: list[int]) -> bool:
    return shape[-1] == other[-1] and math.prod(shape) == math.prod(other)


def _along_last_axis(tensor, shape, panel_shape, builder, relax):
    """``tensor`` (read broadcast to ``shape``) as read on the panel form, or None when it
    varies along other axes than the last and is not of ``shape`` itself."""
    own = static_shape(tensor)
    if own == shape:  # the same shape (a residual): read through a view of its own
        return _bound(relax.op.reshape(tensor, panel_shape), builder, relax)
    if own is None or len(own) > len(shape) or any(d != 1 for d in own[:-1]):
        return None
    if not own or own[-1] == 1:
        if len(own) <= len(panel_shape):
            return [], tensor  # a scalar, or ones that broadcast without adding axes
        return _bound(relax.op.reshape(tensor, []), builder, relax)
    if own[-1] != shape[-1]:
        return None
    return _bound(relax.op.reshape(tensor, panel_shape[-2:]), builder, relax)


def _bound(expr, builder, relax):
    expr = builder.normalize(expr)
    var = relax.DataflowVar("panel_operand", expr.ty)
    return [relax.VarBinding(var, expr)], var


def _op_name(expr) -> str | None:
    name = getattr(getattr(expr, "op", None), "name", None)
    return str(name) if name else None


def static_shape(expr) -> list[int] | None:
    """A Relax expression's shape as ints, or None when it is not static."""
    try:
        return [int(d) for d in expr.ty.shape]
    except (TypeError, AttributeError):
        return None
