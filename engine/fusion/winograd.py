"""3x3 convolutions by Winograd's minimal filtering, F(4x4, 3x3), in channel blocks.

A dense 3x3 conv of stride 1 computes each 4x4 tile of its output from a 6x6 tile of its
input with 36 multiplies per (input channel, output channel) pair where direct
convolution takes 144 (Lavin and Gray, "Fast Algorithms for Convolutional Neural
Networks", 2016). The conv becomes three kernels:

- the input transform ``V = B^T d B`` of every 6x6 input tile, written ``[36, tiles, C]``;
- 36 independent matrix products ``M[k] = V[k] @ U[k]``, ``[tiles, C] x [C, K]``, which the
  default schedule tiles like any batched matmul; ``U = G g G^T``, the weights' transform,
  ``[36, C, K]``, computed once at build time with numpy. (``U`` in panels of the output's
  channel block, ``[36, Kc, C, o]``, was faster for the product alone, 3.74 against 5.12
  ms at 512 channels and 28x28, but not in the model: whole conv layers, alternating in
  one process, 256 x 56 7.3 against 6.2 ms, 64 x 224 14.9 against 11.6, 512 x 28 8.8
  against 9.2);
- the output transform ``Y = A^T M A`` of every tile, written back in the conv's own
  channel blocks (``NCHW{o}c``), the padding at the edges skipped.

The transforms are written out term by term (the matrices' zeros dropped), one vector of
channels of one tile per step, through registers: ``input_transform`` and
``output_transform`` make their TIR, from a template per kind specialized per shape.

onnxruntime's MLAS has no Winograd kernel for float32 on CPUs: its 3x3 convs run direct
(NCHWc). The multiplies saved cost memory: ``U`` is 4x the weights (36 / 9), the
transformed tiles 2.25x the activations, and the transforms' passes over them. So it pays
on large convs and not on small ones (``eligible``), and the conv layout's whole-model
measurement (``whole_model_check.choose_conv_layout``) decides whether a model keeps it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import re
from pathlib import Path

import numpy as np

from engine.fusion.weight_panels import static_shape

M_TILE = 4  # output tile: F(4x4, 3x3)
R = 3
ALPHA = M_TILE + R - 1  # 6: the input tile

# Lavin and Gray's matrices for F(4, 3), interpolation points 0, 1, -1, 2, -2 and infinity.
B_T = np.array(
    [
        [4, 0, -5, 0, 1, 0],
        [0, -4, -4, 1, 1, 0],
        [0, 4, -4, -1, 1, 0],
        [0, -2, -1, 2, 1, 0],
        [0, 2, -1, -2, 1, 0],
        [0, 4, 0, -5, 0, 1],
    ],
    dtype=np.float64,
)
G = np.array(
    [
        [1 / 4, 0, 0],
        [-1 / 6, -1 / 6, -1 / 6],
        [-1 / 6, 1 / 6, -1 / 6],
        [1 / 24, 1 / 12, 1 / 6],
        [1 / 24, -1 / 12, 1 / 6],
        [0, 0, 1],
    ],
    dtype=np.float64,
)
A_T = np.array(
    [
        [1, 1, 1, 1, 1, 0],
        [0, 1, -1, 2, -2, 0],
        [0, 1, 1, 4, 4, 0],
        [0, 1, -1, 8, -8, 1],
    ],
    dtype=np.float64,
)

# Eligible convs: at least this many input and output channels (below, the product is too
# thin to pay for the transforms' passes), at least this many tiles (rows of the product:
# with fewer, each row of U, read once per call, serves too few of them), and at most
# this much of U per tile. One conv with bias and ReLU, 2 threads, an Intel Xeon
# (AVX-512), fastest of 5 rounds alternating in one process, direct (our blocked
# schedule) -> Winograd, onnxruntime's median beside (ms), channels x size: 64 x 56
# 0.93 -> 0.57 (1.0); 128 x 28 0.80 -> 0.49 (0.91); 256 x 56 12.2 -> 6.3 (12.3); 512 x 28
# 12.9 -> 7.8 (25.0); 128 x 14 0.26 -> 0.16 (0.38); 256 x 14 0.85 -> 0.61 (0.87); but
# 512 x 14 (16 tiles, 2.4 MB of U per tile) 3.46 -> 3.49 (3.81); 256 x 8 (4 tiles)
# 0.30 -> 0.34; 512 x 7 0.97 -> 1.39. The limit on U per tile holds where vectors are 16
# lanes wide (AVX-512: direct convs are fast enough there that a conv whose U is read for
# few tiles gains nothing); with 8 lanes (AVX2) direct convs are slower and 512 x 14 gains:
# AMD EPYC Zen 3, 8.52 -> 4.86 ms (onnxruntime 6.16); an Intel Xeon (Emerald Rapids)
# running code built for Zen 3, 10.6 -> 7.6 (fastest of 5 rounds alternating, 2 threads).
MIN_CHANNELS = 32
MIN_TILES = 16
MAX_U_BYTES_PER_TILE = 1 << 20
U_LIMIT_FROM_LANES = 16

HAND_WRITTEN = "workbench.hand_written"  # a kernel's attribute: its TIR is scheduled as written
FLOPS = "workbench.flops"  # a hand-written kernel's floating-point operations per call

_DATA = re.compile(r"NCHW(\d+)c")
_KERNEL_WINDOW_INSIDE = re.compile(r"OI(\d+)iHW(\d+)o")  # [Kc, Cc, ci, 3, 3, o]
_KERNEL_WINDOW_OUTSIDE = re.compile(r"OIHW(\d+)i(\d+)o")  # [Kc, Cc, 3, 3, ci, o]


def transform_weights(kernel: np.ndarray, kernel_layout: str) -> np.ndarray:
    """``U = G g G^T`` for each (input channel, output channel) pair of a blocked 3x3
    kernel, as ``[36, C, K]`` float32 (``C`` and ``K`` in the blocks' order)."""
    if _KERNEL_WINDOW_INSIDE.fullmatch(kernel_layout):
        kc, cc, ci, _, _, o = kernel.shape
        hwck = kernel.transpose(3, 4, 1, 2, 0, 5)  # [3, 3, Cc, ci, Kc, o]
    else:
        kc, cc, _, _, ci, o = kernel.shape
        hwck = kernel.transpose(2, 3, 1, 4, 0, 5)
    hwck = hwck.reshape(R, R, cc * ci, kc * o).astype(np.float64)
    u = np.einsum("ah,hwck,bw->abck", G, hwck, G, optimize=True)
    return np.ascontiguousarray(u.reshape(ALPHA * ALPHA, cc * ci, kc * o), dtype=np.float32)


def eligible(call, weights: set, lanes: int = 16) -> bool:
    """A float32 dense 3x3 conv of stride 1 and dilation 1 in channel blocks, its weight a
    parameter, its shapes static and large enough (:func:`pays` on vectors of ``lanes``)."""
    if getattr(call.op, "name", "") != "relax.nn.conv2d" or len(call.args) != 2:
        return False
    attrs = call.attrs
    data_layout, out_layout = str(attrs.data_layout), str(attrs.out_layout)
    kernel_layout = str(attrs.kernel_layout)
    if not (_DATA.fullmatch(data_layout) and _DATA.fullmatch(out_layout)):
        return False
    if not (
        _KERNEL_WINDOW_INSIDE.fullmatch(kernel_layout)
        or _KERNEL_WINDOW_OUTSIDE.fullmatch(kernel_layout)
    ):
        return False
    if int(attrs.groups) != 1 or [int(s) for s in attrs.strides] != [1, 1]:
        return False
    if [int(d) for d in attrs.dilation] != [1, 1]:
        return False
    data, kernel = call.args
    if kernel not in weights:
        return False
    shapes = [static_shape(data), static_shape(kernel), static_shape(call)]
    if any(s is None for s in shapes):
        return False
    if any(str(e.ty.dtype) != "float32" for e in (data, kernel, call)):
        return False
    window = shapes[1][3:5] if "iHW" in kernel_layout else shapes[1][2:4]
    if window != [R, R]:
        return False
    n, cc, _, _, ci = shapes[0]
    _, kc, oh, ow, o = shapes[2]
    return pays(n, cc * ci, kc * o, oh, ow, lanes)


def pays(
    batch: int, in_channels: int, out_channels: int, out_h: int, out_w: int, lanes: int = 16
) -> bool:
    """Whether a conv of these sizes is large enough for Winograd on a CPU whose fp32
    vectors are ``lanes`` wide (see ``MIN_TILES`` and ``U_LIMIT_FROM_LANES``)."""
    tiles = batch * math.ceil(out_h / M_TILE) * math.ceil(out_w / M_TILE)
    u_bytes = 4 * ALPHA * ALPHA * in_channels * out_channels
    return (
        min(in_channels, out_channels) >= MIN_CHANNELS
        and tiles >= MIN_TILES
        and (lanes < U_LIMIT_FROM_LANES or u_bytes <= MAX_U_BYTES_PER_TILE * tiles)
    )


def to_winograd(imported, lanes: int = 16):
    """``imported`` (an ``importer.ImportedModule`` whose weights were already put in
    channel blocks) with each :func:`eligible` conv of ``main`` computed by Winograd's
    F(4x4, 3x3): input transform, batched product with the transformed weights, output
    transform, the conv's bias and a ReLU after it done in the output transform (``lanes``:
    the target's fp32 vector width, for :func:`pays`). Returns it unchanged when there is
    none. With no weight values (``imported.params`` empty: a build that only counts
    kernels) the module is rewritten and no values computed."""
    from tvm import relax

    from engine.fusion.importer import ImportedModule

    main = imported.mod["main"]
    if main.attrs is None or "num_input" not in main.attrs:
        return imported
    num_input = int(main.attrs["num_input"])
    weight_params = list(main.params[num_input:])
    values = dict(zip(weight_params, imported.params.values(), strict=False))
    weights = set(weight_params)
    convs = _eligible_convs(main, weights, lanes)  # conv variable -> its epilogue
    prim_funcs: dict = {}  # (kind, shapes...) -> GlobalVar
    new_weights: list[tuple] = []  # (Var, numpy or None)
    pending: dict = {}  # the epilogue's last variable -> output_transform's arguments
    absorbed: set = set()  # epilogue bindings done inside an output transform
    binding_nodes = dict(imported.binding_nodes)

    @relax.expr_functor.mutator
    class Rewrite(relax.PyExprMutator):
        def kernel_gv(self, key: tuple, make, name: str):
            if key not in prim_funcs:
                func, flops = make(*key[1:])
                func = func.with_attr(HAND_WRITTEN, True).with_attr(FLOPS, flops)
                prim_funcs[key] = self.builder_.add_func(func, name)
            return prim_funcs[key]

        def visit_var_binding_(self, binding):
            if binding.var in absorbed:
                return None
            if binding.var in pending:
                return self.output_transform(binding.var, *pending.pop(binding.var))
            if binding.var not in convs:
                return super().visit_var_binding_(binding)
            call = binding.value
            data, kernel, attrs = self.visit_expr(call.args[0]), call.args[1], call.attrs
            n, cc, h, w, ci = static_shape(call.args[0])
            out = static_shape(call)
            th, tw = math.ceil(out[2] / M_TILE), math.ceil(out[3] / M_TILE)
            tiles, channels, kc, o = n * th * tw, cc * ci, out[1], out[4]
            u = None
            if kernel in values:
                u = transform_weights(values[kernel], str(attrs.kernel_layout))
            u_var = relax.Var(
                f"weight_winograd{len(new_weights)}",
                relax.TensorType([ALPHA * ALPHA, channels, kc * o], "float32"),
            )
            new_weights.append((u_var, u))
            name = binding.var.name
            nodes = imported.binding_nodes.get(name, ())
            pads = (int(attrs.padding[0]), int(attrs.padding[1]))
            key = ("in", (n, cc, h, w, ci), (th, tw), pads)
            v = self.builder_.emit(
                relax.call_tir(
                    self.kernel_gv(key, input_transform, "winograd_input"),
                    [data],
                    relax.TensorType([ALPHA * ALPHA, tiles, channels], "float32"),
                ),
                name_hint=f"{name}_winograd_in",
            )
            m = self.builder_.emit(
                relax.op.matmul(v, u_var),
                name_hint=f"{name}_winograd_product",
            )
            if nodes:
                binding_nodes[f"{name}_winograd_in"] = nodes
                binding_nodes[f"{name}_winograd_product"] = nodes
            chain, bias, relu = convs[binding.var]
            if not chain:
                return self.output_transform(binding.var, m, out, (th, tw), None, False, nodes)
            absorbed.update(b.var for b in chain[:-1])
            # the output transform computes the conv's last step and its epilogue: its
            # kernel runs all their nodes (the kernel split moves them together)
            for b in chain:
                nodes += imported.binding_nodes.get(b.var.name, ())
            pending[chain[-1].var] = (m, out, (th, tw), bias, relu, tuple(dict.fromkeys(nodes)))
            return None

        def output_transform(self, var, m, out, tiles, bias, relu, nodes):
            key = ("out", tuple(out), tiles, bias is not None, relu)
            args = [m] if bias is None else [m, self.visit_expr(bias)]
            y = relax.call_tir(
                self.kernel_gv(key, output_transform, "winograd_output"),
                args,
                relax.TensorType(out, "float32"),
            )
            if isinstance(var, relax.DataflowVar):
                new_var = self.builder_.emit(y, name_hint=var.name)
            else:
                new_var = self.builder_.emit_output(y, name_hint=var.name)
            if nodes:
                binding_nodes[new_var.name] = nodes
            self.set_var_remap(var, new_var)

    rewriter = Rewrite(imported.mod)
    rewritten = rewriter.visit_expr(main)
    if not new_weights:
        return imported
    still_used = set(relax.analysis.free_vars(rewritten.body))
    kept = [p for p in weight_params if p in still_used]
    params = list(main.params[:num_input]) + kept + [v for v, _ in new_weights]
    func = relax.Function(params, rewritten.body, rewritten.ret_ty, rewritten.is_pure, main.attrs)
    mod = rewriter.builder_.get()
    mod["main"] = func
    weights_out = {}
    if imported.params:
        weights_out = {str(p.name): values[p] for p in kept}
        weights_out.update({str(v.name): u for v, u in new_weights})
    return ImportedModule(
        mod, weights_out, imported.input_names, binding_nodes, imported.folded_nodes
    )


def _eligible_convs(main, weights: set, lanes: int) -> dict:
    """For each :func:`eligible` conv binding's variable: the bindings after it that its
    output transform can do (``([bindings], bias, relu)``): an ``add`` of a per-channel weight
    ``[1, Kc, 1, 1, o]`` (the conv's bias), then a ``relu``, each the only user of what
    it reads."""
    from tvm import relax

    bindings = [b for block in main.body.blocks for b in block.bindings]
    uses: dict = {}
    user: dict = {}
    for b in bindings:
        for v in relax.analysis.free_vars(b.value):
            uses[v] = uses.get(v, 0) + 1
            user[v] = b
    for v in relax.analysis.free_vars(main.body.body):
        uses[v] = uses.get(v, 0) + 2  # returned: never absorbed

    def only_user(var, op: str):
        b = user.get(var)
        if uses.get(var) != 1 or not isinstance(b.value, relax.Call):
            return None
        return b if getattr(b.value.op, "name", "") == op else None

    found = {}
    for b in bindings:
        if not (isinstance(b.value, relax.Call) and eligible(b.value, weights, lanes)):
            continue
        out = static_shape(b.value)
        chain, bias, relu = [], None, False
        add = only_user(b.var, "relax.add")
        if add is not None:
            other = [a for a in add.value.args if not a.same_as(b.var)]
            if (
                len(other) == 1
                and other[0] in weights
                and static_shape(other[0]) == [1, out[1], 1, 1, out[4]]
                and str(other[0].ty.dtype) == "float32"
            ):
                chain, bias = [add], other[0]
        last = chain[-1].var if chain else b.var
        act = only_user(last, "relax.nn.relu")
        if act is not None:
            chain, relu = [*chain, act], True
        found[b.var] = (chain, bias, relu)
    return found


PARSE_CACHE_ENV = "WORKBENCH_TVMSCRIPT_CACHE"


def parse_cache_dir() -> Path | None:
    """Where parsed templates are kept between processes: ``WORKBENCH_TVMSCRIPT_CACHE``,
    else ``~/.cache/workbench/tvmscript``; None when that is ``none``."""
    chosen = os.environ.get(PARSE_CACHE_ENV, "").strip()
    if chosen.lower() == "none":
        return None
    return Path(chosen).expanduser() if chosen else Path.home() / ".cache/workbench/tvmscript"


def _parse(text: str):
    """The PrimFunc of a template's TVMScript.

    TVM's parser took 2-4 s for the two templates a ResNet-50 needs, the first time in a
    process (AMD EPYC Zen 3): a tenth of a second compile that took its tuned kernels from
    the store and its builds from the build cache. So the parsed function is kept as TVM's
    JSON under the sha256 of the text and of TVM's identity (another TVM parses again),
    and loaded in milliseconds by the next process. A file that does not load is parsed
    again and replaced; a cache that cannot be written is only a slower parse."""
    import tvm
    import tvm.script
    from tvm.script import tirx as T

    from engine.fusion.build_cache import tvm_identity
    from engine.graph.prepared_cache import write_atomic

    directory = parse_cache_dir()
    path = None
    if directory is not None:
        identity = json.dumps(tvm_identity(), sort_keys=True)
        digest = hashlib.sha256(f"{identity}\n{text}".encode()).hexdigest()
        path = directory / f"{digest}.json"
        try:
            func = tvm.ir.load_json(path.read_text())
        except Exception:  # noqa: BLE001 - not there, or damaged: parsed (again) below
            pass
        else:
            with contextlib.suppress(OSError):
                os.utime(path)  # recently used: pruned last
            return func
    func = tvm.script.from_source(text, extra_vars={"T": T}, check_well_formed=False)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, tvm.ir.save_json(func).encode())
            _prune(path.parent, PARSE_CACHE_ENTRIES)
        except OSError:
            pass  # a cache that cannot be written is only a slower parse
    return func


# A template parsed for one conv shape is 0.4 MB of JSON: the least recently used go
# beyond this many (about 110 MB)
PARSE_CACHE_ENTRIES = 256


def _prune(directory: Path, keep: int) -> None:
    """Remove the least recently used ``*.json`` beyond ``keep`` (another process may be
    removing them too)."""
    entries = []
    for path in directory.glob("*.json"):
        with contextlib.suppress(OSError):
            entries.append((path.stat().st_mtime, path))
    entries.sort(reverse=True)
    for _, path in entries[keep:]:
        with contextlib.suppress(OSError):
            path.unlink()


def _f32(value: float) -> str:
    return f"T.float32({float(value)!r})"


def _operations(matrix) -> int:
    """Multiplies and adds of one vector of :func:`_combination` per row of ``matrix``."""
    return sum(2 * int(np.count_nonzero(row)) - 1 for row in matrix)


def _combination(coefficients, terms: list[str]) -> str:
    """``sum(c * t)`` over the nonzero coefficients, written as TVMScript."""
    parts = []
    for c, t in zip(coefficients, terms, strict=True):
        if c == 0:
            continue
        if c == 1:
            parts.append(("+", t))
        elif c == -1:
            parts.append(("-", t))
        elif c > 0:
            parts.append(("+", f"{_f32(c)} * {t}"))
        else:
            parts.append(("-", f"{_f32(-c)} * {t}"))
    if not parts:
        return _f32(0)
    sign, first = parts[0]
    text = first if sign == "+" else f"T.float32(0) - {first}"
    for sign, t in parts[1:]:
        text = f"{text} {sign} {t}"
    return text


def _with_root(head: list[str], body: list[str]) -> str:
    """The function's text with its body inside a root block (TVM's analyses expect one)."""
    return "\n".join([*head, '    with T.sblock("root"):', *("    " + b for b in body)]) + "\n"


def _indices(task: str, blocks: str, th: str, tw: str) -> dict[str, str]:
    """Expressions of a task's tile ``p`` and channel block ``c``, its batch ``n`` and its
    first row and column ``row``, ``col``. Written out in every index: bound to scalar
    variables (``LetStmt``) instead, the input transform ran 6x slower (0.167 against
    0.026 ms, 128 channels at 28x28) and the output transform 2x."""
    p = f"({task} // {blocks})"
    return {
        "p": p,
        "c": f"({task} % {blocks})",
        "n": f"({p} // ({th} * {tw}))",
        "row": f"({p} % ({th} * {tw}) // {tw} * {M_TILE})",
        "col": f"({p} % {tw} * {M_TILE})",
    }


_INPUT_DIMS = ("n", "cc", "h", "w", "ci", "th", "tw", "top", "left")
_OUTPUT_DIMS = ("n", "kc", "oh", "ow", "o", "th", "tw")


def input_transform(shape, tiles, pads):
    """``V[36, tiles, C] = B^T d B`` for every 6x6 input tile ``d`` of the blocked input
    ``x[n, Cc, H, W, ci]``, zeros outside it (the conv's padding): the PrimFunc, and its
    floating-point operations."""
    n, cc, _, _, ci = shape
    th, tw = tiles
    dims = dict(zip(_INPUT_DIMS, (*shape, *tiles, *pads), strict=True))
    flops = n * th * tw * cc * ci * 2 * ALPHA * _operations(B_T)
    return _specialized(_input_template(), dims), flops


def output_transform(shape, tiles, bias: bool = False, relu: bool = False):
    """``Y = A^T M A`` for every tile, ``M[36, tiles, K]`` to the blocked output
    ``y[n, Kc, OH, OW, o]``, a tile's rows and columns past the output's edge not written;
    ``bias``: a per-channel ``bias[1, Kc, 1, 1, o]`` added, ``relu``: then ReLU. The
    PrimFunc, and its floating-point operations."""
    n, kc, _, _, o = shape
    th, tw = tiles
    dims = dict(zip(_OUTPUT_DIMS, (*shape, *tiles), strict=True))
    per_tile = (ALPHA + M_TILE) * _operations(A_T) + M_TILE * M_TILE * (bias + relu)
    return _specialized(_output_template(bias, relu), dims), n * th * tw * kc * o * per_tile


def _specialized(template, dims: dict):
    """``template`` with its shape parameters bound to ``dims`` (constants from here on:
    TVM folds them into the index arithmetic). Parsing the TVMScript of each shape took
    0.3-1 s (11 shapes: 10.9 of VGG-19's 17.8 s of fusing in blocks); a template is parsed
    once per process, and specialized per shape."""
    params = {p.name: p for p in template.params}
    return template.specialize({params[name]: value for name, value in dims.items()})


def _left_product(matrix, source: str, target: str, lanes: str) -> list[str]:
    """``target = matrix @ source`` over a tile of vectors held ``ALPHA`` per row in local
    buffers: the first half of a transform ``X^T s X``, one vector statement per entry."""
    lines = []
    for i, row in enumerate(matrix):
        for col in range(ALPHA):
            terms = [f"{source}[{a * ALPHA + col}, lane]" for a in range(ALPHA)]
            lines.append(f"        for lane in T.vectorized({lanes}):")
            lines.append(
                f"            {target}[{i * ALPHA + col}, lane] = {_combination(row, terms)}"
            )
    return lines


@functools.cache
def _input_template():
    head = [
        "@T.prim_func(private=True, s_tir=True)",
        "def winograd_input(x_data: T.handle, v_data: T.handle, "
        + ", ".join(f"{d}: T.int32" for d in _INPUT_DIMS)
        + "):",
        "    T.func_attr({'tirx.noalias': True, 'tir.is_scheduled': True})",
        "    x = T.match_buffer(x_data, (n, cc, h, w, ci), 'float32')",
        f"    V = T.match_buffer(v_data, ({ALPHA * ALPHA}, n * th * tw, cc * ci), 'float32')",
    ]
    body = [
        "    for task in T.parallel(n * th * tw * cc):",
        f"        d = T.decl_buffer(({ALPHA * ALPHA}, ci), 'float32', scope='local')",
        f"        t = T.decl_buffer(({ALPHA * ALPHA}, ci), 'float32', scope='local')",
    ]
    at = _indices("task", "cc", "th", "tw")
    p, c = at["p"], at["c"]
    top_row, left_col = f"({at['row']} - top)", f"({at['col']} - left)"
    # A tile wholly inside the input loads without a test; a tile on its edge tests each
    # row and column with a branch, not a select: TIR's simplifier drops a clamp of the
    # index inside ``Select(inside, x[clamped], 0)`` (it knows ``inside`` there), and a
    # select evaluates both sides: the load ran at the unclamped index, a row and a column
    # before the input, and faulted where that was an unmapped page (VGG-19's 6.4 MB
    # input, 128 channels at 112x112, AMD EPYC).
    whole = (
        f"0 <= {top_row} and {top_row} + {ALPHA} <= h "
        f"and 0 <= {left_col} and {left_col} + {ALPHA} <= w"
    )
    body.append(f"        if {whole}:")
    for r1 in range(ALPHA):
        for r2 in range(ALPHA):
            body.append("            for lane in T.vectorized(ci):")
            body.append(
                f"                d[{r1 * ALPHA + r2}, lane] = "
                f"x[{at['n']}, {c}, {top_row} + {r1}, {left_col} + {r2}, lane]"
            )
    body.append("        else:")
    for r1 in range(ALPHA):
        hh = f"({top_row} + {r1})"
        for r2 in range(ALPHA):
            ww = f"({left_col} + {r2})"
            at_d = f"d[{r1 * ALPHA + r2}, lane]"
            body.append(f"            if 0 <= {hh} and {hh} < h and 0 <= {ww} and {ww} < w:")
            body.append("                for lane in T.vectorized(ci):")
            body.append(f"                    {at_d} = x[{at['n']}, {c}, {hh}, {ww}, lane]")
            body.append("            else:")
            body.append("                for lane in T.vectorized(ci):")
            body.append(f"                    {at_d} = T.float32(0)")
    body += _left_product(B_T, "d", "t", "ci")  # t = B^T d
    for a in range(ALPHA):  # V = t B
        for b in range(ALPHA):
            terms = [f"t[{a * ALPHA + r2}, lane]" for r2 in range(ALPHA)]
            body.append("        for lane in T.vectorized(ci):")
            body.append(
                f"            V[{a * ALPHA + b}, {p}, {c} * ci + lane] = "
                f"{_combination(B_T[b], terms)}"
            )
    return _parse(_with_root(head, body))


@functools.cache
def _output_template(bias: bool, relu: bool):
    head = [
        "@T.prim_func(private=True, s_tir=True)",
        "def winograd_output(m_data: T.handle, "
        + ("bias_data: T.handle, " if bias else "")
        + "y_data: T.handle, "
        + ", ".join(f"{d}: T.int32" for d in _OUTPUT_DIMS)
        + "):",
        "    T.func_attr({'tirx.noalias': True, 'tir.is_scheduled': True})",
        f"    M = T.match_buffer(m_data, ({ALPHA * ALPHA}, n * th * tw, kc * o), 'float32')",
        *(["    bias = T.match_buffer(bias_data, (1, kc, 1, 1, o), 'float32')"] if bias else []),
        "    y = T.match_buffer(y_data, (n, kc, oh, ow, o), 'float32')",
    ]
    body = [
        "    for task in T.parallel(n * th * tw * kc):",
        f"        m = T.decl_buffer(({ALPHA * ALPHA}, o), 'float32', scope='local')",
        f"        s = T.decl_buffer(({M_TILE * ALPHA}, o), 'float32', scope='local')",
    ]
    at = _indices("task", "kc", "th", "tw")
    p, k = at["p"], at["c"]
    for ab in range(ALPHA * ALPHA):
        body.append("        for lane in T.vectorized(o):")
        body.append(f"            m[{ab}, lane] = M[{ab}, {p}, {k} * o + lane]")
    body += _left_product(A_T, "m", "s", "o")  # s = A^T m
    for i in range(M_TILE):  # y = s A, where inside the output
        for j in range(M_TILE):
            terms = [f"s[{i * ALPHA + b}, lane]" for b in range(ALPHA)]
            hh, ww = f"({at['row']} + {i})", f"({at['col']} + {j})"
            value = _combination(A_T[j], terms)
            if bias:
                value = f"{value} + bias[0, {k}, 0, 0, lane]"
            if relu:
                value = f"T.max({value}, T.float32(0))"
            body.append(f"        if {hh} < oh and {ww} < ow:")
            body.append("            for lane in T.vectorized(o):")
            body.append(f"                y[{at['n']}, {k}, {hh}, {ww}, lane] = {value}")
    return _parse(_with_root(head, body))
