"""Relax lowering up to fused TIR kernels, and reading the kernels back out of it.

The stages are TVM's own CPU pipeline (LegalizeOps, AnnotateTIROpPattern, FoldConstant,
FuseOps, FuseTIR), run one by one so the plan can look at the module after FuseOps:
every fused Relax function there is one kernel, every lone ``call_tir`` is one kernel.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

from engine.fusion.winograd import FLOPS

_SLICE = "strided_slice"  # what LegalizeOps names an ONNX Slice
_BLOCKED_DATA = re.compile(r"NCHW\d+c")  # channels in blocks: conv2d_NCHWc's layouts
_BLOCKED_KERNEL = re.compile(r"OIHW\d+i\d+o")
_DEPTHWISE_KERNEL = re.compile(r"OIHW1i\d+o")
_WINDOW_INSIDE_KERNEL = re.compile(r"OI\d+iHW\d+o")  # conv_layout's for windows over 1x1

# TVM's OpPatternKind, as AnnotateTIROpPattern stores it on PrimFuncs.
ELEMWISE, BROADCAST, INJECTIVE, REDUCE, OUT_EWISE, TUPLE, OPAQUE = 0, 1, 2, 3, 4, 7, 8
PATTERN_NAMES = {
    ELEMWISE: "elementwise",
    BROADCAST: "broadcast",
    INJECTIVE: "injective",
    REDUCE: "reduction",
    OUT_EWISE: "anchor (conv/matmul/pool)",
    TUPLE: "tuple",
    OPAQUE: "opaque",
}


@dataclass
class KernelCall:
    """One kernel launch in ``main``: what it runs, on which tensors, from which nodes."""

    index: int
    func: str  # the PrimFunc (after FuseTIR) or fused Relax function name
    prims: list[str]  # the legalized PrimFuncs inside it, in order
    pattern: int
    var: str  # the Relax variable bound to its result in main
    args: list[str]  # Relax variables / params it reads
    nodes: list[str] = field(default_factory=list)  # ONNX nodes
    bytes_in: int = 0
    bytes_out: int = 0
    param_bytes: int = 0
    flops: int = 0
    reduce_extent: int = 1  # product of the reduction extents of its heaviest block


def lower_to_fused(mod, target):
    """LegalizeOps .. FuseOps: returns (legalized module, fused module)."""
    import tvm
    from tvm import relax

    with target:
        legal = tvm.transform.Sequential(
            [
                relax.backend.DispatchSampling(),
                relax.backend.DispatchSortScan(),
                relax.transform.LegalizeOps(fast_math_legalization()),
                relax.transform.AnnotateTIROpPattern(),
                relax.transform.FoldConstant(),
            ]
        )(mod)
        fused = relax.transform.FuseOps()(legal)
    return legal, fused


def fast_math_legalization() -> dict:
    """exp, sigmoid, tanh, erf and softmax on float32 lowered to TOPI's polynomial
    approximations (``fast_exp``, ``fast_tanh``, ``fast_erf``) instead of libm calls:
    LLVM vectorizes these, while it leaves ``expf`` a scalar call per element. SiLU, GELU
    and softmax then run in vector lanes (EfficientNet's SiLU kernels, BERT's GELU). Their
    error is a few float32 ulps; the compile check against onnxruntime and the accuracy
    stage measure it on every build. Other dtypes keep TVM's own legalization."""
    import tvm
    from tvm import topi

    def sigmoid(x):
        one = topi.full_like(x, 1.0)
        return topi.divide(one, topi.add(one, topi.fast_exp(topi.negative(x))))

    def fast(op_name, compute, attrs=lambda call: ()):
        default = tvm.ir.Op.get(op_name).get_attr("FLegalize")

        def legalize(bb, call):
            if str(getattr(call.ty, "dtype", "")) != "float32":
                return default(bb, call)
            return bb.call_te(compute, call.args[0], *attrs(call))

        return legalize

    def softmax_axis(call):
        return (int(call.attrs.axis),)

    power_default = tvm.ir.Op.get("relax.power").get_attr("FLegalize")

    def power(bb, call):
        # x ** 2 and x ** 3 (GPT-2's tanh GELU) as multiplies: powf is a scalar call per
        # element, 7x the time of the matmul it follows here.
        exponent = _constant_scalar(call.args[1])
        if str(getattr(call.ty, "dtype", "")) == "float32" and exponent in (2.0, 3.0):
            if exponent == 2.0:
                return bb.call_te(lambda x: topi.multiply(x, x), call.args[0])
            return bb.call_te(lambda x: topi.multiply(topi.multiply(x, x), x), call.args[0])
        return power_default(bb, call)

    conv_default = tvm.ir.Op.get("relax.nn.conv2d").get_attr("FLegalize")

    def conv2d(bb, call):
        # Channel blocks (engine.fusion.conv_layout): TOPI's NCHWc conv, and a depthwise
        # one and a window-inside one of our own; LegalizeOps handles none of them.
        attrs = call.attrs
        blocked = _BLOCKED_DATA.fullmatch(str(attrs.data_layout)) and _BLOCKED_DATA.fullmatch(
            str(attrs.out_layout)
        )
        if not blocked:
            return conv_default(bb, call)
        out_dtype = str(attrs.out_dtype)
        if out_dtype in ("", "None", "void"):
            out_dtype = str(call.ty.dtype)
        kernel_layout, groups = str(attrs.kernel_layout), int(attrs.groups)
        if groups > 1 and _DEPTHWISE_KERNEL.fullmatch(kernel_layout):
            compute, layouts, hint = _depthwise_blocked, [], "depthwise_conv2d"
        elif groups == 1 and _BLOCKED_KERNEL.fullmatch(kernel_layout):
            compute, hint = topi.nn.conv2d_NCHWc, "conv2d"
            layouts = [str(attrs.data_layout), str(attrs.out_layout)]
        elif groups == 1 and _WINDOW_INSIDE_KERNEL.fullmatch(kernel_layout):
            compute, layouts, hint = _conv_window_inside, [], "conv2d"
        else:
            return conv_default(bb, call)
        return bb.call_te(
            compute,
            call.args[0],
            call.args[1],
            [int(v) for v in attrs.strides],
            [int(v) for v in attrs.padding],
            [int(v) for v in attrs.dilation],
            *layouts,
            out_dtype,
            primfunc_name_hint=hint,
        )

    return {
        "relax.nn.conv2d": conv2d,
        "relax.exp": fast("relax.exp", topi.fast_exp),
        "relax.sigmoid": fast("relax.sigmoid", sigmoid),
        "relax.tanh": fast("relax.tanh", topi.fast_tanh),
        "relax.erf": fast("relax.erf", topi.fast_erf),
        "relax.nn.softmax": fast("relax.nn.softmax", topi.nn.fast_softmax, softmax_axis),
        "relax.power": power,
    }


def _depthwise_blocked(data, kernel, strides, padding, dilation, out_dtype):
    """Depthwise conv in channel blocks: data NCHW{c}c, kernel OIHW1i{c}o (one filter per
    channel), output NCHW{c}c; the lanes are the block's channels, each multiplied by its
    own filter (TOPI has no generic compute for it)."""
    from tvm import te, topi

    batch, chunks, height, width, block = (int(d) for d in data.shape)
    _, _, kernel_h, kernel_w, _, _ = (int(d) for d in kernel.shape)
    top, left, bottom, right = padding
    padded = topi.nn.pad(data, (0, 0, top, left, 0), (0, 0, bottom, right, 0), name="data_pad")
    out_h = (height + top + bottom - (kernel_h - 1) * dilation[0] - 1) // strides[0] + 1
    out_w = (width + left + right - (kernel_w - 1) * dilation[1] - 1) // strides[1] + 1
    kh = te.reduce_axis((0, kernel_h), name="kh")
    kw = te.reduce_axis((0, kernel_w), name="kw")
    return te.compute(
        (batch, chunks, out_h, out_w, block),
        lambda n, c, oh, ow, cb: te.sum(
            padded[
                n, c, oh * strides[0] + kh * dilation[0], ow * strides[1] + kw * dilation[1], cb
            ].astype(out_dtype)
            * kernel[c, 0, kh, kw, 0, cb].astype(out_dtype),
            axis=[kh, kw],
        ),
        name="depthwise_conv2d_NCHWc",
    )


def _conv_window_inside(data, kernel, strides, padding, dilation, out_dtype):
    """Dense conv in channel blocks, its kernel ``OI{i}iHW{o}o``: TOPI's ``conv2d_NCHWc``
    with the window inside the input-channel block, so one input channel's window of
    weights lies in one run (``OIHW{i}i{o}o`` puts its positions a whole block apart: 4 KB
    in blocks of 32, every one in the same L1 set). See ``conv_layout._conv_layouts``."""
    from tvm import te, tirx, topi

    batch, _, height, width, in_block = (int(d) for d in data.shape)
    out_chunks, in_chunks, _, kernel_h, kernel_w, out_block = (int(d) for d in kernel.shape)
    top, left, bottom, right = padding
    padded = data
    if top or left or bottom or right:
        padded = topi.nn.pad(data, (0, 0, top, left, 0), (0, 0, bottom, right, 0), name="data_pad")
    dilated_h = (kernel_h - 1) * dilation[0] + 1
    dilated_w = (kernel_w - 1) * dilation[1] + 1
    out_h = (height + top + bottom - dilated_h) // strides[0] + 1
    out_w = (width + left + right - dilated_w) // strides[1] + 1
    ic = te.reduce_axis((0, in_chunks * in_block), name="ic")
    kh = te.reduce_axis((0, kernel_h), name="kh")
    kw = te.reduce_axis((0, kernel_w), name="kw")
    div, mod = tirx.indexdiv, tirx.indexmod
    return te.compute(
        (batch, out_chunks, out_h, out_w, out_block),
        lambda n, oc_chunk, oh, ow, oc_block: te.sum(
            padded[
                n,
                div(ic, in_block),
                oh * strides[0] + kh * dilation[0],
                ow * strides[1] + kw * dilation[1],
                mod(ic, in_block),
            ].astype(out_dtype)
            * kernel[oc_chunk, div(ic, in_block), mod(ic, in_block), kh, kw, oc_block].astype(
                out_dtype
            ),
            axis=[ic, kh, kw],
        ),
        name="conv2d_NCHWc",
        tag="conv2d_NCHWc",
    )


def _constant_scalar(expr) -> float | None:
    """The value of a one-element constant, else None."""
    import tvm

    if not isinstance(expr, tvm.ir.expr.Constant) or not hasattr(expr.value, "numpy"):
        return None
    value = expr.value.numpy()
    return float(value.reshape(-1)[0]) if value.size == 1 else None


def fuse_tir(fused_mod, target):
    import tvm
    from tvm import relax

    with target:
        return tvm.transform.Sequential(
            [relax.transform.FuseTIR(), relax.transform.DeadCodeElimination()]
        )(fused_mod)


def kernel_calls(
    fused_mod, legal_mod, binding_nodes: dict[str, tuple[str, ...]], node_order: list[str]
):
    """The kernels of ``main`` after FuseOps, each with the ONNX nodes it computes.

    FuseOps deduplicates structurally equal fused functions, so a function's body names
    the bindings of only one of its call sites. The members of each call are found in
    the module before fusion instead: the vanished bindings whose inputs are the call's
    arguments or earlier members, running the call's kernels.
    """
    from tvm import relax

    main = fused_mod["main"]
    types = {p.name: p.ty for p in main.params}
    param_names = {p.name for p in main.params[int(main.attrs["num_input"]) :]}
    before = [b for block in legal_mod["main"].body.blocks for b in block.bindings]
    after = [b for block in main.body.blocks for b in block.bindings]
    surviving = {b.var.name for b in after}
    vanished = []  # (name, prim, reads) of bindings that moved into fused functions
    for b in before:
        if b.var.name not in surviving and isinstance(b.value, relax.Call):
            gv, args = _callee(b.value, relax)
            if gv is not None:
                vanished.append((b.var.name, gv.name_hint, set(_var_names(args, relax))))
    claimed: set[str] = set()
    alias: dict[str, str] = {}  # a fused call's result -> its last binding before fusion
    calls: list[KernelCall] = []
    for b in after:
        types[b.var.name] = b.var.ty
        if not isinstance(b.value, relax.Call):
            continue
        callee, args = _callee(b.value, relax)
        if callee is None:
            continue
        func = fused_mod[callee]
        arg_names = _var_names(args, relax)
        if isinstance(func, relax.Function):
            inner = [ib for block in func.body.blocks for ib in block.bindings]
            prim_vars = [_callee(ib.value, relax)[0] for ib in inner if _is_tir(ib, relax)]
            prim_funcs = [fused_mod[gv] for gv in prim_vars]
            prims = [gv.name_hint for gv in prim_vars]
            pattern = max((_pattern(f) for f in prim_funcs), default=OPAQUE)
            members = _claim(vanished, claimed, {alias.get(a, a) for a in arg_names}, prims)
            if members:
                alias[b.var.name] = members[-1]
        else:
            prims, pattern, prim_funcs, members = [callee.name_hint], _pattern(func), [func], []
        call = KernelCall(len(calls), callee.name_hint, prims, pattern, b.var.name, arg_names)
        call.nodes = _nodes_of([b.var.name, *members], binding_nodes)
        call.bytes_out = _bytes(b.var.ty)
        sliced = _sliced_bytes(func, relax) if isinstance(func, relax.Function) else {}
        call.bytes_in = sum(sliced.get(k, _bytes(types.get(a))) for k, a in enumerate(arg_names))
        if callee.name_hint.startswith(_SLICE) and arg_names:
            call.bytes_in = call.bytes_out  # a lone slice reads only what it writes
        call.param_bytes = sum(_bytes(types.get(a)) for a in arg_names if a in param_names)
        work = [_work(p) for p in prim_funcs]
        call.flops = sum(f for f, _ in work)
        call.reduce_extent = max((r for _, r in work), default=1)
        calls.append(call)
    rank = {n: i for i, n in enumerate(node_order)}
    for call in calls:
        call.nodes.sort(key=lambda n: rank.get(n, len(rank)))
    return calls


def _claim(vanished, claimed: set[str], allowed: set[str], prims: list[str]) -> list[str]:
    """Take the vanished bindings a fused call computes, in order (see kernel_calls)."""
    need = Counter(prims)
    members: list[str] = []
    inside = set(allowed)
    grown = True
    while grown:
        grown = False
        for name, prim, reads in vanished:
            if name in claimed or need[prim] <= 0 or not reads <= inside:
                continue
            members.append(name)
            claimed.add(name)
            inside.add(name)
            need[prim] -= 1
            grown = True
    return members


def _sliced_bytes(func, relax) -> dict[int, int]:
    """Parameters a fused kernel only slices: it reads the slices, not the whole tensor."""
    params = {p.name: k for k, p in enumerate(func.params)}
    users: dict[str, list] = {}
    for block in func.body.blocks:
        for b in block.bindings:
            if isinstance(b.value, relax.Call):
                gv, args = _callee(b.value, relax)
                for a in args:
                    if isinstance(a, relax.Var) and a.name in params:
                        users.setdefault(a.name, []).append((gv, b.var.ty))
    return {
        params[name]: sum(_bytes(ty) for _, ty in uses)
        for name, uses in users.items()
        if all(gv is not None and gv.name_hint.startswith(_SLICE) for gv, _ in uses)
    }


def _var_names(args, relax) -> list[str]:
    return [a.name for a in args if isinstance(a, relax.Var)]


def _nodes_of(names: list[str], binding_nodes: dict[str, tuple[str, ...]]) -> list[str]:
    return list(dict.fromkeys(node for n in names for node in binding_nodes.get(n, ())))


def _is_tir(binding, relax) -> bool:
    return isinstance(binding.value, relax.Call) and _callee(binding.value, relax)[0] is not None


def _callee(call, relax):
    """(GlobalVar, args) for ``call_tir(prim, args)`` or a call to a fused function."""
    import tvm

    op = call.op
    if isinstance(op, tvm.ir.Op) and op.name == "relax.call_tir":
        gv, args = call.args[0], call.args[1]
        return gv, list(args.fields) if isinstance(args, relax.Tuple) else [args]
    if isinstance(op, tvm.ir.GlobalVar):
        return op, list(call.args)
    return None, []


def _pattern(func) -> int:
    attrs = getattr(func, "attrs", None)
    if attrs is not None and "op_pattern" in attrs:
        return int(attrs["op_pattern"])
    return OPAQUE


def _bytes(ty) -> int:
    """Bytes of a tensor (or tuple of tensors) type; 0 when not static."""
    if ty is None:
        return 0
    fields = getattr(ty, "fields", None)
    if fields is not None:
        return sum(_bytes(f) for f in fields)
    shape = getattr(ty, "shape", None)
    dtype = getattr(ty, "dtype", None)
    if shape is None or dtype is None:
        return 0
    try:
        dims = (
            [int(d) for d in shape.values] if hasattr(shape, "values") else [int(d) for d in shape]
        )
    except (TypeError, ValueError, AttributeError):
        return 0
    import tvm

    bits = tvm.runtime.DataType(str(dtype)).bits
    return math.prod(dims) * max(bits // 8, 1)


def _work(prim) -> tuple[int, int]:
    """(flops, largest reduction extent) of a PrimFunc: one flop per block instance, two
    (multiply and add) per instance of a reduction block."""
    if prim.attrs is not None and FLOPS in prim.attrs:  # a hand-written kernel
        return int(prim.attrs[FLOPS]), 1
    total = 0
    biggest = 1

    def visit(stmt, extent: int) -> None:
        nonlocal total, biggest
        kind = type(stmt).__name__
        if kind == "For":
            visit(stmt.body, extent * _int(stmt.extent))
        elif kind == "SeqStmt":
            for child in stmt.seq:
                visit(child, extent)
        elif kind in ("SBlockRealize", "BlockRealize"):
            block = stmt.block
            iters = list(block.iter_vars)
            reduce = math.prod(_int(iv.dom.extent) for iv in iters if int(iv.iter_type) == 2)
            if iters:
                total += extent * (2 if reduce > 1 else 1)
                biggest = max(biggest, reduce)
            visit(block.body, extent)
        elif hasattr(stmt, "body"):
            visit(stmt.body, extent)

    try:
        visit(prim.body, 1)
    except (AttributeError, TypeError, ValueError):  # unusual TIR loses only the estimate
        return 0, 1
    return total, biggest


def _int(value) -> int:
    try:
        return int(value)
    except TypeError:
        return 1
