"""The layout convolutions run in, chosen per model by measurement.

Two layouts are built for a model with convolutions:

- ``nchw``: activations stay NCHW; a dense conv's weights are stored IHWO (output channels
  innermost, where the default schedule vectorizes), computed once at build time.
- ``blocked``: activations in channel blocks two vector registers wide, NCHW32c on
  AVX-512 (onnxruntime's NCHWc transformer does the like for MLAS); dense and depthwise
  convs take blocks, other grouped convs stay NCHW. A conv's lanes are
  then a contiguous block of output channels, its input is read in place (no transposed
  copy per call), its output needs no scatter back to NCHW, and pools and elementwise
  ops between convs run in the same blocks. ConvertLayout inserts the transforms at the
  edges; the weights are re-blocked once at build time.

Neither wins everywhere. Measured on one thread, TVM alone (``bench/tvm_build_bench.py``,
fastest runs, this machine's AVX-512 CPU), NCHW against blocked, onnxruntime beside:
transformers' ResNet 0.75 / 0.44 ms (0.35), MobileNetV2 1.85 / 0.95 ms (0.79),
transformers' EfficientNet 2.00 / 1.18 ms (1.19), but SegFormer 2.52 / 2.86 ms (1.71): its
convs sit between attention blocks, and the transforms at every edge cost more than the
blocks save. So the compile stage builds both and keeps the faster
(``whole_model_check.choose_conv_layout``).
"""

from __future__ import annotations

from engine.fusion.options import CONV_LAYOUTS

LAYOUTS = CONV_LAYOUTS[1:]  # the options' names, "auto" aside
NCHW, BLOCKED = LAYOUTS
_AS_IT_IS = {"relax.nn.conv2d": ["NCHW", "OIHW", "NCHW"]}
_IHWO = {"relax.nn.conv2d": ["NCHW", "IHWO", "NCHW"]}


# A windowed conv's weights with the window inside the input-channel block,
# ``OI{i}iHW{o}o``: one input channel's window of weights in one run. In ``OIHW{i}i{o}o``
# its positions lie a block apart (4 KB in blocks of 32, all in one L1 set). Four 3x3
# convs with bias and ReLU, 2 threads, 15 alternating rounds (an Intel Xeon, AVX-512):
# 64 ch at 56x56 5.75 -> 5.12 ms, 128 at 28x28 6.62 -> 6.25, 256 at 14x14 6.32 -> 6.12.
WINDOW_INSIDE = True


class LayoutUnsupported(Exception):
    """The model cannot take the blocked layout (an operator between convs has no
    layout rule for channel blocks); the NCHW build stands."""


def blockable_convs(mod, lanes: int) -> int:
    """How many convs of ``mod`` the blocked layout would block."""
    return _count_calls(mod, lambda call: _conv_layouts(call, lanes) is not None)


def _count_calls(mod, wanted) -> int:
    """How many calls of ``mod``'s ``main`` satisfy ``wanted``."""
    from tvm import relax

    found = []

    def visit(expr):
        if isinstance(expr, relax.Call) and wanted(expr):
            found.append(expr)

    relax.analysis.post_order_visit(mod["main"], visit)
    return len(found)


def to_blocked(mod, lanes: int):
    """``mod`` with every blockable dense or depthwise NCHW conv in channel blocks of
    twice ``lanes`` (or ``lanes``, ``lanes / 2``, 4: the largest that divides its
    channels); the rest as it was.
    Raises :class:`LayoutUnsupported` when ConvertLayout cannot carry the blocks."""
    from tvm import relax

    def desired(call):
        if getattr(call.op, "name", "") != "relax.nn.conv2d":
            return {}
        if str(call.attrs.data_layout) != "NCHW" or str(call.attrs.kernel_layout) != "OIHW":
            return {}
        # A conv left NCHW says so: with no wish, ConvertLayout would hand it its input's
        # blocks with an OIHW kernel, and fail (SegFormer's convs after a blocked one).
        layouts = _conv_layouts(call, lanes)
        return {"relax.nn.conv2d": layouts} if layouts else nchw_layouts(call)

    convert = relax.transform.ConvertLayout({}, desired)
    try:
        mod = _clips_as_min_max(mod)
        return convert(mod)
    except Exception as e:  # noqa: BLE001 - TVM's layout inference refused an operator
        refused = e
    for fenced in _FENCED:  # again, with the operators whose rules refuse blocks in NCHW
        try:
            return _without_fences(convert(_fenced(mod, fenced)))
        except Exception:  # noqa: BLE001 - refused still: the next set, or the first reason
            continue
    raise LayoutUnsupported(str(refused).strip().splitlines()[-1][:300]) from refused


# Operators whose layout rules in TVM fail on channel blocks instead of taking them back to
# NCHW: layer_norm (ConvNeXt's, over the channels) and its kin, expand_dims and squeeze;
# then, as well, concat (GoogLeNet's: branches in blocks of 32 and of 16 channels). The
# whole model went NCHW for one of them. Fewest first: each costs layout transforms.
_NORMS = frozenset(
    {
        "relax.nn.layer_norm",
        "relax.nn.group_norm",
        "relax.nn.instance_norm",
        "relax.nn.rms_norm",
        "relax.expand_dims",
        "relax.squeeze",
    }
)
_FENCED = (_NORMS, _NORMS | {"relax.concat"})
_FENCE = "relax.grad.no_grad"  # an identity with no layout rule: its input goes to NCHW


def _fenced(mod, ops: frozenset):
    """``mod`` with the data of each call of ``ops`` (every tensor of a tuple: concat's)
    behind an identity that has no layout rule, so that ConvertLayout hands it NCHW (a
    layout transform from the blocks before it, into blocks again after it where a blocked
    conv reads the result)."""
    from tvm import relax

    @relax.expr_functor.mutator
    class Fence(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if getattr(call.op, "name", "") not in ops:
                return call
            data = call.args[0]
            if isinstance(data, relax.Tuple):
                fenced = relax.Tuple([relax.op.grad.no_grad(f) for f in data.fields])
            else:
                fenced = relax.op.grad.no_grad(data)  # the builder binds it
            return relax.Call(call.op, [fenced, *call.args[1:]], call.attrs, call.ty_args)

    return _each_function(mod, lambda func: Fence().visit_expr(func))


def _without_fences(mod):
    """``mod`` with :func:`_fenced`'s identities taken out again."""
    from tvm import relax
    from tvm.relax.dpl import is_op, rewrite_call, wildcard

    pattern = is_op(_FENCE)(wildcard())
    unfenced = _each_function(
        mod, lambda func: rewrite_call(pattern, lambda expr, matches: expr.args[0], func)
    )
    return relax.transform.CanonicalizeBindings()(unfenced)


def _each_function(mod, transform):
    """``mod`` with ``transform`` applied to each of its Relax functions."""
    import tvm
    from tvm import relax

    updated = tvm.IRModule(dict(mod.functions))
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            updated[gv] = transform(func)
    return updated


def nchw_layouts(call) -> dict:
    """ConvertLayout's wish for one call of an NCHW build: a dense or grouped conv's weights
    IHWO (output channels innermost, where its schedule vectorizes: transposed once at
    build time instead of in the kernel on every call); a depthwise conv (its schedule
    reads OIHW in place) and every other op as they are.

    One wish for the whole model, applied only where every conv was dense, left ConvNeXt's
    and SegFormer's dense convs transposing their weights on every call, as they also have
    depthwise convs: ConvNeXt's 2x2 downsampling conv took 346 us, 57 us with IHWO
    (onnxruntime 65). A grouped conv with OIHW weights vectorized its output columns
    instead, with predicated lanes: AlexNet's 5x5 two-group conv took 37.9 ms, 4.6 ms with
    IHWO (onnxruntime 2.7; 1 thread)."""
    if getattr(call.op, "name", "") != "relax.nn.conv2d":
        return {}
    attrs = call.attrs
    if str(attrs.data_layout) != "NCHW" or str(attrs.kernel_layout) != "OIHW":
        return {}
    groups = int(attrs.groups)
    if groups == 1:
        return _IHWO
    try:
        depthwise = groups == int(call.args[0].ty.shape[1])
    except (TypeError, AttributeError, IndexError):
        return _AS_IT_IS  # a symbolic channel count
    return _AS_IT_IS if depthwise else _IHWO


def weights_to_transpose(mod) -> bool:
    """``mod`` has a conv whose weights :func:`nchw_layouts` would store IHWO."""
    return _count_calls(mod, lambda call: nchw_layouts(call) is _IHWO) > 0


def _clips_as_min_max(mod):
    """TVM's ONNX frontend imports ``Clip`` (MobileNet's ReLU6) as prebuilt TIR calls
    ``maximum(x, low)`` and ``minimum(x, high)``, which ConvertLayout cannot see into:
    it took the activations back to NCHW and into blocks again around every ReLU6. With
    constant bounds they become Relax's ``maximum`` and ``minimum``, which it carries
    blocks through; FuseOps fuses them into the conv as before."""
    import tvm
    from tvm import relax
    from tvm.relax.dpl import is_op, rewrite_call, wildcard

    mod = relax.transform.FoldConstant()(mod)  # the bounds' NaN guards, to constants
    pattern = is_op("relax.call_tir")(wildcard(), wildcard())
    ops = {"maximum": relax.op.maximum, "minimum": relax.op.minimum}

    def rewrite(expr, matches):
        callee, args = expr.args[0], expr.args[1]
        name = getattr(callee, "name_hint", "").rstrip("0123456789")
        fields = getattr(args, "fields", None)
        if name not in ops or fields is None or len(fields) != 2:
            return expr
        data, bound = fields
        if not isinstance(bound, tvm.ir.GenericConst) or bound.value.numpy().size != 1:
            return expr
        if str(bound.value.dtype) != str(getattr(data.ty, "dtype", "")):
            return expr
        return ops[name](data, bound)

    updated = _each_function(mod, lambda func: rewrite_call(pattern, rewrite, func))
    return relax.transform.DeadCodeElimination()(updated)


def _conv_layouts(call, lanes: int) -> list[str] | None:
    """[data, kernel, output] layouts for a dense NCHW conv2d, or None to leave it.

    Output channels in blocks of ``2 * lanes`` (or ``lanes``, half, 4); input channels
    likewise, or all in one block when there are fewer than ``lanes`` of them (an RGB
    image's 3: the first conv reads NCHW3c, the image transposed once, and writes
    blocks); a depthwise conv in the same blocks in and out."""
    if getattr(call.op, "name", "") != "relax.nn.conv2d":
        return None
    attrs = call.attrs
    if str(attrs.data_layout) != "NCHW" or str(attrs.kernel_layout) != "OIHW":
        return None
    try:
        in_channels = int(call.args[0].ty.shape[1])
        out_channels = int(call.args[1].ty.shape[0])
    except (TypeError, AttributeError, IndexError):
        return None  # a symbolic channel count: leave it NCHW
    # Two registers wide first: a register tile of 7 rows x 2 vectors keeps 14 sums in
    # flight, enough to hide the FMA latency; 7 x 1 was not (ResNet-50, 1 thread: 80.5 ms
    # in blocks of 16, 63.0 in blocks of 32, 69.5 in blocks of 64; onnxruntime 50).
    sizes = tuple(dict.fromkeys((2 * lanes, lanes, lanes // 2, 4)))
    groups = int(attrs.groups)
    if groups != 1:  # depthwise (one filter per channel) in blocks; other groupings stay
        if not groups == in_channels == out_channels:
            return None
        block = next((b for b in sizes if b > 1 and in_channels % b == 0), None)
        return None if block is None else [f"NCHW{block}c", f"OIHW1i{block}o", f"NCHW{block}c"]
    out_block = next((b for b in sizes if b > 1 and out_channels % b == 0), None)
    in_block = next((b for b in sizes if b > 1 and in_channels % b == 0), None)
    if in_block is None and in_channels < lanes:
        in_block = in_channels
    if out_block is None or in_block is None:
        return None
    kernel = f"OIHW{in_block}i{out_block}o"
    if WINDOW_INSIDE and _window(call) > 1:
        kernel = f"OI{in_block}iHW{out_block}o"
    return [f"NCHW{in_block}c", kernel, f"NCHW{out_block}c"]


def _window(call) -> int:
    try:
        return int(call.args[1].ty.shape[2]) * int(call.args[1].ty.shape[3])
    except (TypeError, AttributeError, IndexError):
        return 1
