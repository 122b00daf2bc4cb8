"""Default CPU schedules for kernels nobody tuned, so untuned code is already reasonable.

TVM's CPU pipeline lowers every kernel as written by TOPI: serial scalar loops (an
untuned ResNet-50 runs ~100x slower than onnxruntime). Here each fused kernel gets a
schedule from its structure, the way MetaSchedule's rules would shape one sample:

- the anchor (the reduction with the largest reduce extent: conv, matmul) gets a
  register tile: the innermost output axis is vectorized, a second spatial axis whose
  index does not address the vectorized operand is unrolled over (that load is reused),
  the tile accumulates in a local buffer and the epilogue (bias, residual, ReLU) is
  fused into the write-back (Souffle's "epilogue adopts the anchor's schedule");
- elementwise producers and consumers are inlined where TIR allows it, except a small
  value a larger elementwise consumer reads broadcast (a squeeze-excite's scale): that is
  computed once, in a block of its own;
- a depthwise conv (a small reduction whose channel indexes both operands: no register
  reuse to tile for) runs parallel over (batch, channel), its padding computed per channel
  next to it and its inner loops left to LLVM's vectorizer: measured here 0.11 ms for a
  144x56x56 3x3 depthwise conv against 1.4 ms with every loop fused into one parallel loop
  and 0.20 ms for onnxruntime's single-threaded kernel;
- a copy that reads along one axis and writes along another (a layout transform between
  channel blocks and NCHW, a transpose) runs in tiles, a vector of the written axis by a
  run of the read one (``_copy_tile``);
- every other block runs parallel over its outer spatial loops and vectorized inside.

A kernel the rules cannot shape keeps the simpler schedule, and one that fails even
that stays as it was: a schedule changes speed, never results.
"""

from __future__ import annotations

import contextlib
import math
import re
from dataclasses import dataclass
from typing import NamedTuple

from engine.fusion.schedule_rows import row_reduction
from engine.fusion.winograd import HAND_WRITTEN

_MIN_ANCHOR_REDUCE = 4  # below: a reduction is not worth a register tile
_MIN_GEMV_REDUCE = 64  # ... nor one without register rows (depthwise conv) below this
_GEMV_REGISTERS = 8  # a matrix-vector tile's sums, at most (``_choose_tile``)
_ROWS = (7, 8, 6, 4, 5, 3, 2)  # register rows of the tile, first divisor wins
_SCHEDULED = "tir.is_scheduled"
_FEW_SUMS = 10  # a tile two registers wide holding at most this many sums is widened
# An elementwise block a consumer reads this many times per value (broadcast) is computed
# once, not inlined: EfficientNet's squeeze-excite scale, sigmoid(conv(pooled)) of 144
# values, was computed again for each of the 451,584 elements it scales (a polynomial exp
# each): 148 us for the kernel, onnxruntime 23.
_BROADCAST_READS = 8
_MIN_SHARES = 8  # parallel shares of a tiled kernel below which its last tile loop joins
# Steps of a lone reduction loop (a 1x1 conv's input channels, a matmul's K) unrolled per
# iteration. One step is two weight loads, seven broadcasts and fourteen FMAs; LLVM left
# that loop rolled, its index arithmetic (``ic // 32``, ``ic % 32``) and branch on every
# step. Unrolled by 4, one process, rounds alternating, 2 threads, an Intel Xeon (AVX-512),
# GFLOP/s before -> after: 1x1 convs NCHW32c 128->128 at 56x56 145 -> 163-229,
# 512->128 at 28x28 189 -> 251, 256->512 at 56x56 stride 2 186 -> 207; matmuls [K, N]
# 128x768x768 181 -> 206, 196x768x768 189 -> 232. A conv with a window (3x3) already
# has a body of nine steps: unchanged (211 -> 213).
_REDUCE_UNROLL = 4
# Input channels of a block of a conv's reduction (``_reduce_blocks``): 64 for a 1x1 conv,
# 16 for a conv with a window (a 3x3's: 144 products an output channel, 9 KB of weights
# in blocks of 16 output channels).
_REDUCE_BLOCK = 64
_WINDOW_BLOCK = 16
_HELD_SUMS_BYTES = 16 << 10  # a share's sums held between the blocks, half an L1


@dataclass(frozen=True)
class CpuScheduleConfig:
    vector_lanes: int = 8  # fp32 lanes of the target's vector registers
    parallel_min_extent: int = 2
    vector_registers: int = 32
    """Vector registers the target has: 32 with AVX-512 or NEON, 16 with AVX2."""

    @property
    def accumulators(self) -> int:
        """Registers a tile may keep its sums in: the rest hold the broadcast value, the
        operand's loads and the compiler's temporaries (AVX2 has no broadcast operand, so
        each row's value takes a register of its own)."""
        return self.vector_registers - 4


def vector_lanes(target) -> int:
    """fp32 lanes of the target's widest vector register (4 when unknown).

    On x86 the width comes from the CPU's features: LLVM's own answer
    (``llvm_get_vector_width``) is 512 bits for every x86 CPU with this TVM wheel, Zen 3
    and Haswell included, and AVX2 machines got AVX-512's tiles, 16 lanes in two registers
    and twice as many sums as they have registers: BERT-small ran in 17.0 ms against
    onnxruntime's 9.4, 8.3 against 9.7 in 8 lanes with its sums in registers (AMD EPYC
    Zen 3, 2 threads, one compile each)."""
    from tvm.target import codegen

    try:
        if codegen.target_has_features("sse2", target):  # x86
            bits = 512 if codegen.target_has_features("avx512f", target) else 256
            bits = bits if codegen.target_has_features("avx", target) else 128
        else:
            bits = int(codegen.llvm_get_vector_width(target))
        return max(4, bits // 32)
    except Exception:  # noqa: BLE001 - non-LLVM targets
        return 4


def vector_registers(target) -> int:
    """Vector registers of the target: 32 with AVX-512 (16 lanes) or on AArch64, else 16
    (AVX2, AVX, SSE)."""
    if vector_lanes(target) >= 16:
        return 32
    triple = str(getattr(target, "attrs", {}).get("mtriple", "") or "")
    return 32 if triple.startswith(("aarch64", "arm64")) else 16


def apply_default_schedules(mod, target):
    """Schedule every PrimFunc of ``mod`` that is not scheduled yet; returns the module
    and ``{kernel: "tiled" | "parallel" | "none"}``."""
    import tvm

    config = CpuScheduleConfig(
        vector_lanes=vector_lanes(target), vector_registers=vector_registers(target)
    )
    kinds: dict[str, str] = {}
    updates = {}
    for gv, func in mod.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        if func.attrs is not None and _SCHEDULED in func.attrs and func.attrs[_SCHEDULED]:
            kinds[gv.name_hint] = "hand-written" if HAND_WRITTEN in func.attrs else "tuned"
            continue
        scheduled, kind = schedule_cpu(func, config)
        kinds[gv.name_hint] = kind
        if scheduled is not None:
            updates[gv] = scheduled.with_attr(_SCHEDULED, True)
    if updates:
        mod = mod.clone()
        for gv, func in updates.items():
            mod[gv] = func
    return mod, kinds


def schedule_cpu(func, config: CpuScheduleConfig):
    """(scheduled PrimFunc or None, kind) for one kernel."""
    rules = (
        ("tiled", _tiled),
        ("plane", _plane_window),
        ("window", _window),
        ("per-channel", _per_channel),
        ("rows", row_reduction),
        ("parallel", _parallel_only),
    )
    sch = None
    for kind, rule in rules:
        if sch is None:
            sch = _schedule(func)
        try:
            if rule(sch, config):
                return sch.mod["main"], kind
        except Exception:  # noqa: BLE001 - TIR schedule errors: try the simpler rule
            pass
        if _edited(sch):  # the next rule starts from a fresh copy
            sch = None
    return None, "none"


_READS = frozenset({"GetSBlock", "GetLoops", "GetChildBlocks", "GetProducers", "GetConsumers"})
"""Schedule instructions that only look at the kernel."""


def _edited(sch) -> bool:
    """Whether ``sch`` changed its kernel: a rule that gave up before its first step left
    the copy as it was, for the next rule (a copy costs 3-7 ms, and most rules give up on
    most kernels)."""
    return any(inst.kind.name not in _READS for inst in sch.trace.insts)


def _schedule(func):
    """A schedule of a copy of ``func``: a schedule edits the function it is given in
    place (the caller's module too), so a rule that failed halfway left its steps for the
    next rule to start from."""
    import tvm
    from tvm_ffi.serialization import from_json_graph_str, to_json_graph_str

    # Not tvm.ir.load_json: it first upgrades the JSON from older TVM versions, in Python
    # (5 ms a conv against 2; DenseNet's 242 kernels scheduled in 3.0 s instead of 5.3).
    copy = from_json_graph_str(to_json_graph_str(func))
    return tvm.s_tir.Schedule(copy.with_attr("global_symbol", "main"))


def _blocks(sch):
    return list(sch.get_child_blocks(sch.get_sblock("root")))


def _iter_types(sch, block) -> list[int]:
    return [int(iv.iter_type) for iv in sch.get(block).iter_vars]


def _extents(sch, loops) -> list[int]:
    return [_int(sch.get(loop).extent) for loop in loops]


def _reduce_extent(sch, block) -> int:
    iters = sch.get(block).iter_vars
    return math.prod(_int(iv.dom.extent) for iv in iters if int(iv.iter_type) == 2)


def _anchor(sch):
    """The reduction block with the largest reduce extent, if it is big enough."""
    best, best_extent = None, _MIN_ANCHOR_REDUCE - 1
    for block in _blocks(sch):
        extent = _reduce_extent(sch, block)
        if extent > best_extent:
            best, best_extent = block, extent
    return best


def _tiled(sch, config: CpuScheduleConfig) -> bool:
    nest = _nest(sch)
    if nest is None:
        return False
    anchor, n_spatial = nest.anchor, nest.n_spatial
    tile = _choose_tile(sch, anchor, n_spatial, config)
    if tile is None:
        return False
    name = sch.get(anchor).name_hint
    padded = _pad_to_tile(sch, anchor, tile)
    _inline_consumers_of(sch, anchor, keep=name)
    if tile.relayout is not None:
        read_index, dim = tile.relayout
        cached = sch.cache_read(anchor, read_index, "global")
        ndim = len(_buffer(sch.get(cached).writes[0]).shape)
        sch.transform_layout(cached, ("write", 0), _move_last(dim, ndim))
    writeback = sch.cache_write(anchor, 0, "local")
    out_dims = [_names(str(r.min)) for r in sch.get(anchor).writes[0].region]
    vector_name = str(sch.get(anchor).iter_vars[tile.vector_axis].var)
    vector_dims = [d for d, names in enumerate(out_dims) if vector_name in names]
    if len(vector_dims) == 1 and vector_dims[0] != len(out_dims) - 1:
        # Accumulators in lanes: the vectorized axis must be innermost in the tile.
        sch.transform_layout(anchor, ("write", 0), _move_last(vector_dims[0], len(out_dims)))
    if not padded:  # TIR would inline the un-padding copy over the padded tile's range
        _fuse_epilogue(sch, writeback)
    loops = sch.get_loops(anchor)
    spatial, reduce = loops[:n_spatial], loops[n_spatial:]
    vec_o, vec_i = sch.split(spatial[tile.vector_axis], [None, tile.vector])
    outer, inner = [], []
    if tile.predicated:  # register by register: a predicated loop 112 lanes wide took 3x
        registers, vec_i = sch.split(vec_i, [None, config.vector_lanes])
        inner.append(registers)
    for k, loop in enumerate(spatial):
        if k == tile.vector_axis:
            outer.append(vec_o)
        elif k == tile.row_axis:
            row_o, row_i = sch.split(loop, [None, tile.rows])
            outer.append(row_o)
            inner.append(row_i)
        else:
            outer.append(loop)
    by_axis = dict(enumerate(outer))
    if tile.row_axis is not None:
        # The larger operand is read from memory once: the lanes' operand's own loops go
        # just outside the row tiles, in their order. Lanes' operand the larger: those
        # after the rows move out, its tile stays while every row tile passes by (the
        # lanes' loop, and a panel's index in ``weight_panels``' products: [rows, panel,
        # lanes]). Rows' operand the larger: those before the rows move in, so each
        # thread's share is a band of rows read once while every lanes' tile passes by. A
        # 1x1 conv 256 -> 64 at 56x56 (NCHW16c), its output-channel chunk outermost,
        # streamed the 3.2 MB input once per chunk: 1.04-1.42 ms against 0.94-0.96 with the
        # chunk inside the rows (AMD EPYC Zen 3, 2 threads, one process, alternating).
        # Whole models on an EPYC Zen 4 (AVX-512, 2 threads): DenseNet-121 30.3 -> 28.8 ms,
        # VGG-19 101.0 -> 97.9, ResNet-50 34.1 -> 34.0.
        sweep = [outer[k] for k in tile.sweep if (k > tile.row_axis) == tile.lanes_outer]
        for loop in sweep:
            outer.remove(loop)
        at = outer.index(row_o)
        outer[at:at] = sweep
    if tile.fan_axis is not None:  # its steps inside the tile, unrolled with the rows
        fanned = by_axis[tile.fan_axis]
        fan_o, fan_i = sch.split(fanned, [None, tile.fan])
        outer[outer.index(fanned)] = fan_o
        inner.insert(0, fan_i)
    rest = steps = None
    long = [loop for loop, n in zip(reduce, _extents(sch, reduce), strict=True) if n > 1]
    if len(long) == 1 and _int(sch.get(long[0]).extent) % _REDUCE_UNROLL == 0:
        at = reduce.index(long[0])
        rest, steps = sch.split(long[0], [None, _REDUCE_UNROLL])
        reduce = [*reduce[:at], rest, steps, *reduce[at + 1 :]]
    # The channels' reduction in blocks, each block over all the tiles of a thread's share
    # (``_reduce_blocks``): the share's sums wait in L1 between blocks.
    channel, chunk = rest, _REDUCE_BLOCK // _REDUCE_UNROLL
    if rest is None and len(reduce) == 3:  # a conv with a window: ic, kh, kw
        channel, chunk = reduce[0], _WINDOW_BLOCK
    inside = _reduce_blocks(sch, outer, channel, chunk, len(reduce), tile, config)
    blocks, share, held = None, outer, []
    if inside:
        at = reduce.index(channel)
        blocks, reduce[at] = sch.split(channel, [None, chunk])
        share, held = outer[:-inside], [blocks, *outer[-inside:]]
    sch.reorder(*share, *held, *reduce, *inner, vec_i)
    sch.reverse_compute_at(writeback, share[-1])
    widened = tile.fan if tile.fan_axis == tile.vector_axis else 1
    _vectorize_innermost(sch, writeback, tile.vector * widened)
    # Loop annotations first: after decompose_reduction the update block no longer
    # counts as a reduction, and TIR refuses to parallelize or vectorize around it.
    sch.vectorize(vec_i)
    for loop in [*inner, *([steps] if steps is not None else [])]:
        sch.unroll(loop)
    # The last outer loop stays inside each thread's share (its tiles reuse what the
    # outer ones hold) unless the loops outside it leave too few shares to spread: a
    # matrix-vector product (one row) then ran on one thread however many were asked for.
    if blocks is not None:  # the share's loops, all of them (``_reduce_blocks`` kept enough)
        parallel = sch.fuse(*share) if len(share) > 1 else share[0]
    elif math.prod(_extents(sch, outer[:-1])) < _MIN_SHARES and len(outer) > 1:
        parallel = sch.fuse(*outer)
    else:
        parallel = sch.fuse(*outer[:-1]) if len(outer) > 2 else outer[0]
    sch.parallel(parallel)
    sch.decompose_reduction(anchor, blocks if blocks is not None else reduce[0])
    for block in _blocks(sch):
        if sch.get(block).name_hint not in (name, f"{name}_init") and not _is_under(
            sch, block, parallel
        ):
            _parallel_block(sch, block, config)
    return True


def _reduce_blocks(sch, outer, channel, chunk: int, n_reduce: int, tile: _Tile, config) -> int:
    """How many of the last loops of ``outer`` (the tiles of a thread's share) go inside a
    loop over blocks of ``chunk`` steps of ``channel``, a conv's input-channel loop (None:
    it has none); 0: none, each tile runs its whole reduction. ``n_reduce``: the
    reduction's loops (a conv's channels, its window's two, a 1x1's unrolled steps).

    A conv in channel blocks over a small plane (ResNet-50's 1024 -> 256 at 14x14, 2048
    -> 512 at 7x7) ran its whole reduction for each register tile: each tile streamed its
    weights, 64 KB to 128 KB, from L2 and used each line for 7 sums. With the channels in
    blocks (64 of a 1x1 conv, 16 of a 3x3) and the tiles of a share inside each block, a
    block's weights (4 KB, 9 KB in blocks of 16 output channels) stay in L1 while every
    tile of the share passes by; the share's sums, at most ``_HELD_SUMS_BYTES``, wait in
    L1 between blocks, as MLAS's NCHWc kernels accumulate into their output. Convs with
    bias and ReLU, 2 threads, an AMD EPYC Zen 3 (AVX2), each model's fastest run in one
    process, rounds alternating (onnxruntime beside): 1x1 2048 -> 512 at 7x7 988 -> 765
    us (600), 1024 -> 256 at 14x14 972 -> 746 (591), 3x3 512 -> 512 at 7x7 1663 -> 1440
    (1221). Whole models, everything on TVM: ResNet-50 57.0 -> 53.5 ms (47.6), DenseNet-
    121 64.5 -> 60.3 (56.3), Inception v1 19.1 -> 18.0 (28.6). Only on targets with 16
    vector registers (AVX2), where it was measured: on AVX-512 the tiles hold twice the
    sums, and the convs already ran at 0.85x onnxruntime's time (an EPYC Zen 4)."""
    if config.vector_registers > 16 or channel is None or n_reduce < 3:
        return 0
    steps = _int(sch.get(channel).extent)
    if steps % chunk or steps <= chunk:
        return 0
    sums = tile.rows * tile.vector * tile.fan * 4  # bytes of one tile's sums
    held = 0
    for extent in reversed(_extents(sch, outer)):
        if sums * extent > _HELD_SUMS_BYTES or held + 1 >= len(outer):
            break
        if math.prod(_extents(sch, outer[: len(outer) - held - 1])) < _MIN_SHARES:
            break  # too few shares left to spread over the threads
        sums, held = sums * extent, held + 1
    reuse = math.prod(_extents(sch, outer[len(outer) - held :])) if held else 1
    return held if reuse > 1 else 0


def _pad_to_tile(sch, anchor, tile: _Tile) -> bool:
    """Pad the anchor's iteration space to whole tiles when no vector width divides the
    vectorized axis (ViT's 197 tokens: 208 lanes, 203 rows), or the register rows do not
    divide theirs. A tile whose lanes are predicated keeps its accumulators in a buffer as
    large as the whole output, not in registers: ViT's 197x197 attention scores took 3.6 ms
    against onnxruntime's 0.09 ms (1 thread), 0.21 ms padded. Predicated rows guard every
    step of the reduction: a 197 x 768 x 768 product with bias took 3.35-3.65 ms (64-69
    GFLOP/s) in 6-row tiles, its last one predicated, 1.53 ms padded to 198 rows
    (onnxruntime 1.38-1.57); 197 x 768 x 3072 13.5 against 7.1 ms (AMD EPYC Zen 3, AVX2,
    2 threads, one process, rounds alternating). The padded operands are copied once, and
    the epilogue runs on the unpadded result as a block of its own. An anchor TIR cannot
    pad (not an einsum: a conv) keeps the predicated tile."""
    extents = [_int(iv.dom.extent) for iv in sch.get(anchor).iter_vars]
    padding = [1] * len(extents)
    padding[tile.vector_axis] = tile.vector
    if tile.row_axis is not None:
        padding[tile.row_axis] = tile.rows
    rows_whole = tile.row_axis is None or extents[tile.row_axis] % tile.rows == 0
    if tile.predicated or (extents[tile.vector_axis] % tile.vector == 0 and rows_whole):
        return False
    try:
        sch.pad_einsum(anchor, padding)
    except Exception:  # noqa: BLE001 - not an einsum: the tile stays predicated
        return False
    return True


@dataclass(frozen=True)
class _Tile:
    vector_axis: int  # spatial axis computed in vector lanes
    vector: int
    row_axis: int | None  # spatial axis unrolled over (register rows)
    rows: int
    relayout: tuple[int, int] | None  # (read index, dim) of an operand to copy transposed
    lanes_outer: bool = False  # the lanes' operand is the larger: its tiles loop outermost
    sweep: tuple[int, ...] = ()  # spatial axes indexing the lanes' operand alone
    fan_axis: int | None = None  # a sweep axis whose next ``fan`` steps join the tile
    fan: int = 1
    predicated: bool = False  # the last tile's lanes predicated, not padded (``_pad_to_tile``)


def _choose_tile(sch, anchor, n_spatial: int, config: CpuScheduleConfig) -> _Tile | None:
    """Vectorize along an axis that indexes one operand and not the other (so the other
    operand's value is broadcast), over register rows of an axis of the other operand.
    An operand whose vectorized dimension is not innermost (conv weights OIHW) is read
    through a transposed copy."""
    block = sch.get(anchor)
    names = [str(iv.var) for iv in block.iter_vars]
    extents = [_int(iv.dom.extent) for iv in block.iter_vars][:n_spatial]
    output = _buffer(block.writes[0])
    reads = [(k, r) for k, r in enumerate(block.reads) if not _buffer(r).same_as(output)]
    if len(reads) != 2:
        return None
    texts = [[str(dim.min) for dim in r.region] for _, r in reads]
    used = [[_names(text) for text in dims] for dims in texts]
    flat = [set().union(*dims) for dims in used]
    best = None
    for a, b in ((0, 1), (1, 0)):
        for k in range(n_spatial):
            # A grouped conv reads its input at ``ff // C``: constant over a tile of ff
            # that divides C, so that operand is still broadcast across the lanes.
            group = _group_size(names[k], texts[b]) if names[k] in flat[b] else extents[k]
            if group is None:
                continue
            common = math.gcd(extents[k], group)
            width = _divisor(common, (config.vector_lanes, config.vector_lanes // 2, 4))
            if width == 1 and common == extents[k] and extents[k] > config.vector_lanes:
                width = config.vector_lanes  # no divisor (197): lanes, the tail predicated
            if names[k] not in flat[a] or width == 1:
                continue
            dims = [d for d, vars_ in enumerate(used[a]) if names[k] in vars_]
            if len(dims) != 1:
                continue
            last = texts[a][-1]
            contiguous = dims[0] == len(used[a]) - 1 and f"{names[k]} *" not in last
            # Lanes read straight from memory beat wider ones that copy an operand
            # transposed on every call, down to half a register (an 8-channel NCHW8c
            # conv: 55 us through a transposed input, 13 us in place).
            direct = contiguous and width * 2 >= config.vector_lanes
            key = (direct, width, contiguous, dims[0] == len(used[a]) - 1, extents[k])
            if best is None or key > best[0]:
                best = (key, k, a, b, dims[0])
    if best is None:
        return None
    (_, width, contiguous, _, extent), k, a, b, dim = best
    group = _group_size(names[k], texts[b]) or extent
    vector = 2 * width if math.gcd(extent, group) % (2 * width) == 0 else width
    rows_axes = [
        j
        for j in range(n_spatial)
        if names[j] in flat[b] and names[j] not in flat[a] and extents[j] > 1
    ]
    # A grouped conv's output channel reads the input only as ``ff // C``: rows of ff
    # within one group share the input vector, so ff can still be the register rows.
    grouped_rows = [
        j
        for j in range(n_spatial)
        if names[j] in flat[b]
        and names[j] in flat[a]
        and extents[j] > 1
        and j != k
        and _group_size(names[j], texts[a]) is not None
    ]
    row = rows_axes[-1] if rows_axes else (grouped_rows[-1] if grouped_rows else None)
    rows = 1
    if row is not None:
        span = extents[row]
        if row in grouped_rows:
            span = math.gcd(span, _group_size(names[row], texts[a]))
        vector, rows = _rows_and_lanes(
            span, extents[row], vector, width, row in grouped_rows, config
        )
    if row is None and _reduce_extent(sch, anchor) < _MIN_GEMV_REDUCE:
        return None  # depthwise conv: no reuse to tile for; the simple rule does as well
    predicated = False
    if row is None:
        width, vector, predicated = _gemv_vector(extent, group, width, config)
    relayout = None if contiguous else (reads[a][0], dim)
    # Sweep the larger operand once: a tile of it stays in cache while every tile of the
    # smaller one passes by (the smaller is re-read from cache). GPT-2's lm_head, 128 rows
    # times a 128x8192 weight, streamed the 4 MB weight once per 8 rows: 52 GFLOP/s.
    larger = _nbytes(_buffer(reads[a][1])) > _nbytes(_buffer(reads[b][1]))
    sweep = tuple(j for j in range(n_spatial) if names[j] in flat[a] and names[j] not in flat[b])
    others = tuple(j for j in sweep if j != k)
    if rows > 1:
        # the vector's own chunks count too: two of them, a tile twice as wide
        chunks = {j: extents[j] for j in others}
        if extent % vector == 0 and math.gcd(extent, group) % (2 * vector) == 0:
            chunks[k] = extent // vector
        fan_axis, fan, rows = _fanned(chunks, span, vector, rows, config)
    else:
        fan_axis, fan = _chains(others, extents, vector, config)
    return _Tile(
        k,
        vector,
        row if rows > 1 else None,
        rows,
        relayout,
        larger,
        sweep,
        fan_axis,
        fan,
        predicated,
    )


def _gemv_vector(
    extent: int, group: int, width: int, config: CpuScheduleConfig
) -> tuple[int, int, bool]:
    """(register width, tile lanes, predicated) of a matrix-vector product's tile.

    A row no whole register divides (a classifier's 100 or 1000 classes): whole
    registers, as many as the row fills up to 8, each an independent sum, the last tile's
    lanes predicated. In registers of 4 lanes, one sum a tile, each step waited for the
    last: 1 x 1280 x 100 with bias 18.6 us, 4.5 in one tile of 7 registers (onnxruntime's
    whole run 9; the kernel alone, 2 threads, an AMD EPYC Zen 4). Padded instead, the
    weight was copied on every call: 42 us. Otherwise wide tiles read each weight row in
    bursts."""
    if group == extent and extent % config.vector_lanes and extent > width:
        lanes = config.vector_lanes
        return lanes, lanes * min(_GEMV_REGISTERS, -(-extent // lanes)), True
    for wide in (8, 4, 2):
        if math.gcd(extent, group) % (wide * width) == 0:
            return width, wide * width, False
    return width, width, False


def _fanned(
    chunks: dict[int, int], span: int, vector: int, rows: int, config: CpuScheduleConfig
) -> tuple[int | None, int, int]:
    """(axis, factor, rows): a tile one register wide holds too few sums (7 rows: 7 of the
    target's 32 registers) to keep the FMA units busy; ``factor`` steps of a sweep axis
    (a conv's output-channel chunk) join it, each input value broadcast once for all of
    them, as MLAS's NCHWc kernels compute several filter blocks at once. At least two
    times the sums, within the accumulators less four, whole rows of at least four.
    Blocked 1x1 convs, 2 threads, an Intel Xeon (AVX-512), one kernel, fastest of 7x50
    runs: 16 -> 144 channels at 56x56 (NCHW16c) 83-95 -> 58-65 us, 24 -> 144 (NCHW8c in)
    115 -> 81, 40 -> 240 at 28x28 67 -> 50, 144 -> 24 (NCHW8c out) 142 -> 122. A tile two
    registers wide (NCHW32c) already holds 14: two more chunks measured slower (64 -> 256
    at 56x56: 310 -> 427 us), so it keeps its own; but a tile two registers wide over
    fewer than 6 rows (ViT's 50 tokens: 5 rows, 10 sums) takes two chunks of its lanes'
    operand (two vectors of a [K, N] weight, two panels): 50 x 768 x 192 45.7-46.7 ->
    39-43 us, 50 x 192 x 768 49.7 -> 41 (the kernel alone, 2 threads)."""
    per_row = -(-vector // config.vector_lanes)
    held = rows * per_row
    limit = config.accumulators - 4
    best = (None, 1, rows)
    if per_row > 2 or (per_row == 2 and held > _FEW_SUMS):
        return best
    for axis, extent in chunks.items():
        for factor in range(2, 9):
            if extent % factor:
                continue
            fitting = [
                r for r in _ROWS if r >= 4 and factor * r * per_row <= limit and span % r == 0
            ]
            if not fitting or factor * fitting[0] * per_row < 2 * held:
                continue
            if best[0] is None or factor * fitting[0] > best[1] * best[2]:
                best = (axis, factor, fitting[0])
    return best


def _chains(
    sweep: tuple[int, ...], extents: list[int], vector: int, config: CpuScheduleConfig
) -> tuple[int | None, int]:
    """(axis, factor): a matrix-vector product whose tile is one register (a classifier's
    1000 outputs in panels of 8: no wider tile divides) adds every weight row into one
    register, each FMA waiting for the last; ``factor`` panels in one step keep that many
    sums in flight. EfficientNet-B0's 1280 -> 1000 classifier in the model (VM instrument,
    2 threads, an Intel Xeon): 120-143 -> 96-110 us."""
    if -(-vector // config.vector_lanes) > 1:
        return None, 1  # already several registers wide (``wide`` above)
    best = (None, 1)
    for axis in sweep:
        for factor in range(2, 9):
            if extents[axis] % factor == 0 and factor > best[1]:
                best = (axis, factor)
    return best


def _rows_and_lanes(
    span: int, extent: int, vector: int, width: int, grouped: bool, config: CpuScheduleConfig
) -> tuple[int, int]:
    """(lanes, register rows) of a tile whose rows divide ``span`` where they can, its sums
    within :attr:`CpuScheduleConfig.accumulators`. A tile two registers wide whose rows do
    not fit becomes one register wide when that holds more sums in a whole tile (AVX2, 7
    columns of a conv's output: 7 rows of one register, not an imperfect 6 of two).

    A span no row count divides (13, 17: SqueezeNet's and AlexNet's 13x13 planes,
    Inception v3's 17x17) is one tile of all its rows, one register wide, where the sums
    fit: an imperfect tile (7 rows, the last six predicated) guards every step of the
    reduction, and a conv cannot be padded to whole tiles (:func:`_pad_to_tile`). Blocked
    1x1 convs, one kernel, 2 threads, an AMD EPYC Zen 4 (AVX-512), medians of alternating
    runs in two processes each: 512 -> 1024 at 13x13 1.21-1.93 -> 0.91-1.00 ms, 768 -> 192
    at 17x17 0.62-0.75 -> 0.42-0.48 (onnxruntime 0.83-0.95, 0.44-0.47)."""
    best = None
    for lanes in dict.fromkeys((vector, width)):
        per_row = -(-lanes // config.vector_lanes)
        allowed = tuple(r for r in _ROWS if r * per_row <= config.accumulators) or (1,)
        rows = _divisor(span, allowed)
        if rows == 1 and per_row == 1 and max(_ROWS) < span <= config.accumulators:
            rows = span  # no divisor (13, 17): all of them, one whole row tile
        if grouped and rows == 1:
            rows = allowed[0]
        whole = rows > 1 and span % rows == 0
        if rows == 1 and extent > allowed[0]:
            rows = allowed[0]  # no divisor (e.g. 13): an imperfect tile, its tail predicated
        key = (whole, rows * per_row)
        if best is None or key > best[0]:  # ties: the wider tile, tried first
            best = (key, lanes, rows)
    return best[1], best[2]


def _group_size(name: str, texts: list[str]) -> int | None:
    """C when every use of ``name`` in these index expressions is ``name // C``; None
    when it is used any other way."""
    sizes = set()
    for text in texts:
        rest = text
        for match in re.finditer(rf"\b{re.escape(name)} // T\.int64\((\d+)\)", text):
            sizes.add(int(match.group(1)))
            rest = rest.replace(match.group(0), "")
        if name in _names(rest):
            return None
    return math.gcd(*sizes) if sizes else None


def _move_last(dim: int, ndim: int):
    from tvm import tirx

    return tirx.IndexMap.from_func(lambda *idx: [*idx[:dim], *idx[dim + 1 :], idx[dim]], ndim=ndim)


def _buffer(region):
    """The buffer a block read/write region refers to (``source`` in this TVM)."""
    return getattr(region, "buffer", None) or region.source


def _names(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_]\w*", text))


class _Nest(NamedTuple):
    anchor: object
    block: object
    reads: list
    """The regions the anchor reads, its own output excluded."""
    loops: list
    n_spatial: int
    """Its first loops are spatial, this many; the rest reduce."""

    @property
    def names(self) -> list[str]:
        return [str(iv.var) for iv in self.block.iter_vars]


def _nest(sch) -> _Nest | None:
    """The kernel's anchor when its loops are its block's iterators, the spatial ones
    first, then the reduce ones (the anchor has one: it reduces at least
    ``_MIN_ANCHOR_REDUCE``); None otherwise, for the simpler rules. Every rule that tiles
    or reorders the anchor's loops starts here."""
    anchor = _anchor(sch)
    if anchor is None:
        return None
    block = sch.get(anchor)
    output = _buffer(block.writes[0])
    reads = [r for r in block.reads if not _buffer(r).same_as(output)]
    types, loops = _iter_types(sch, anchor), sch.get_loops(anchor)
    if len(loops) != len(types) or types != sorted(types):
        return None
    return _Nest(anchor, block, reads, loops, types.count(0))


def _per_channel(sch, config: CpuScheduleConfig) -> bool:
    """Depthwise conv: parallel over the leading spatial loops up to the channel (the first
    axis both operands are indexed by), the padded input and the epilogue computed inside
    that loop, one channel at a time, the rest as written."""
    nest = _nest(sch)
    if nest is None or len(nest.reads) != 2:
        return False
    anchor, loops, names = nest.anchor, nest.loops, nest.names
    if _reduce_extent(sch, anchor) >= _MIN_GEMV_REDUCE:
        return False
    used = [set().union(*(_names(str(dim.min)) for dim in r.region)) for r in nest.reads]
    shared = [k for k in range(nest.n_spatial) if all(names[k] in u for u in used)]
    if not shared or shared[0] + 1 >= nest.n_spatial:
        return False  # no channel axis, or nothing left inside it
    name = nest.block.name_hint
    _inline_consumers_of(sch, anchor, keep=name)
    lead = loops[: shared[0] + 1]
    outer = sch.fuse(*lead) if len(lead) > 1 else lead[0]
    for producer in sch.get_producers(anchor):
        with contextlib.suppress(Exception):  # a weight read straight from its parameter
            sch.compute_at(producer, outer)
    for consumer in sch.get_consumers(anchor):
        with contextlib.suppress(Exception):
            sch.reverse_compute_at(consumer, outer)
    sch.parallel(outer)
    for other in _blocks(sch):
        if not _is_under(sch, other, outer):
            _parallel_block(sch, other, config)
    return True


def _window(sch, config: CpuScheduleConfig) -> bool:
    """A pool, or a depthwise conv in channel blocks (a small window reduced per output,
    the innermost output axis the innermost of every operand): the window's loops outside,
    that axis in vector lanes inside, the outer output loops in parallel. As written, every
    output element was a scalar loop over its window (a 3x3 max pool over 64x64x32,
    NCHW16c: 85 us; onnxruntime's 14 us; ours now 9 us). A depthwise conv (a filter read
    beside the input) goes on to a register tile of its own (``_window_tile``)."""
    nest = _nest(sch)
    if nest is None or not nest.reads:
        return False
    anchor, reads, loops, n_spatial = nest.anchor, nest.reads, nest.loops, nest.n_spatial
    # A long reduction of one tensor (a global pool in channel blocks, a squeeze-excite's
    # mean) the same way, its sums in registers: parallel over the channels with every
    # lane a scalar loop over 112x112 strided by the block, it took 198 us for 32 channels
    # (onnxruntime 14).
    long = _reduce_extent(sch, anchor) > 64
    if n_spatial < 2 or (long and len(reads) > 1):
        return False
    lane_var = nest.names[n_spatial - 1]
    for read in reads:
        last = str(read.region[-1].min)
        if lane_var not in _names(last) or f"{lane_var} *" in last:
            return False  # lanes would gather (NCHW, strided): measured slower than scalar
    extent = _int(sch.get(loops[n_spatial - 1]).extent)
    lanes = _divisor(extent, (config.vector_lanes, config.vector_lanes // 2, 4))
    if lanes == 1:
        return False
    _inline_elementwise(sch)
    if not long and len(reads) > 1 and n_spatial >= 3:
        return _window_tile(sch, nest, lanes, config)
    writeback = sch.cache_write(anchor, 0, "local") if long else None
    loops = sch.get_loops(anchor)
    spatial, reduce = loops[:n_spatial], loops[n_spatial:]
    lane_o, lane_i = sch.split(spatial[-1], [None, lanes])
    outer = [*spatial[:-1], lane_o]
    sch.reorder(*outer, *reduce, lane_i)
    sch.vectorize(lane_i)
    parallel = sch.fuse(*outer)
    sch.parallel(parallel)
    if writeback is not None:
        sch.reverse_compute_at(writeback, parallel)
        _vectorize_innermost(sch, writeback, lanes)
    sch.decompose_reduction(anchor, reduce[0])
    for other in _blocks(sch):
        if not _is_under(sch, other, parallel):
            _parallel_block(sch, other, config)
    return True


_WINDOW_COLUMNS = (4, 2, 7, 3, 5)
"""Output columns a depthwise conv's register tile takes, the first that divides the
output's width (none: one). Measured on an AMD EPYC Zen 4 (AVX-512, 2 threads, blocks of
32, bias and ReLU6, TVM's time_evaluator, 2, 4, 7 and 8 columns each): four were the
fastest at 112 and 56 wide (32 channels at 112x112: 92 us as a vector per output, 53 in
four columns, 63 in seven, 71 in eight) and within 20% of two at 28 wide; at 14 wide, where
four do not divide, two (576 channels: 33 -> 18 us); at 7 wide, seven (960 channels:
14 -> 9 us)."""


def _window_tile(sch, nest: _Nest, lanes: int, config: CpuScheduleConfig) -> bool:
    """A depthwise conv in channel blocks as a register tile: a few output columns times
    the whole channel block, its sums in registers while the window's loops run over it
    (each filter tap's vector is loaded once per tile), the epilogue (bias, activation)
    applied as the tile is written back. As ``_window`` wrote it, every output vector
    went through memory at each of the window's taps and the epilogue made a second pass
    over the output: MobileNetV2's first depthwise conv (32 channels at 112x112, bias and
    ReLU6) 92 us, tiled 54 (onnxruntime 84 inside the model)."""
    anchor, n_spatial = nest.anchor, nest.n_spatial
    spatial = sch.get_loops(anchor)[:n_spatial]
    chunks = _int(sch.get(spatial[-1]).extent) // lanes
    width = _int(sch.get(spatial[-2]).extent)
    columns = next(
        (c for c in _WINDOW_COLUMNS if width % c == 0 and c * chunks <= config.accumulators), 1
    )
    writeback = sch.cache_write(anchor, 0, "local")
    _fuse_epilogue(sch, writeback)
    loops = sch.get_loops(anchor)
    spatial, reduce = loops[:n_spatial], loops[n_spatial:]
    chunk, lane = sch.split(spatial[-1], [None, lanes])
    column_o, column_i = sch.split(spatial[-2], [None, columns])
    outer = sch.fuse(*spatial[:-2]) if n_spatial > 3 else spatial[0]
    sch.reorder(outer, column_o, *reduce, column_i, chunk, lane)
    sch.reverse_compute_at(writeback, column_o)
    _vectorize_innermost(sch, writeback, lanes * chunks)
    sch.vectorize(lane)
    sch.unroll(column_i)
    sch.unroll(chunk)
    sch.parallel(outer)
    sch.decompose_reduction(anchor, reduce[0])
    for other in _blocks(sch):
        if not _is_under(sch, other, outer):
            _parallel_block(sch, other, config)
    return True


def _plane_window(sch, config: CpuScheduleConfig) -> bool:
    """A pool over NCHW planes (the window slides along the output's innermost axis, the
    image's columns): parallel over the planes, each plane's padded copy made inside that
    loop, then its rows, the columns in vector lanes inside the window's loops. Inlined,
    the padding's bounds check sat on every lane of every window step (a 3x3 max pool over
    128x28x28, stride 1: 361 us; onnxruntime 34). Strided columns (a gather) stay scalar:
    still no bounds check inside."""
    nest = _nest(sch)
    if nest is None or len(nest.reads) != 1 or nest.n_spatial < 3:
        return False
    anchor, reads, loops, n_spatial = nest.anchor, nest.reads, nest.loops, nest.n_spatial
    if _reduce_extent(sch, anchor) > 64:
        return False
    names = nest.names
    last = _names(str(reads[0].region[-1].min))
    if names[n_spatial - 1] not in last or not last & set(names[n_spatial:]):
        return False  # not a window along the columns (channel blocks: ``_window``)
    producers = sch.get_producers(anchor)
    if not producers:
        return False  # nothing padded: ``_window`` as it is
    strided = f"{names[n_spatial - 1]} *" in str(reads[0].region[-1].min)
    extent = _int(sch.get(loops[n_spatial - 1]).extent)
    lanes = 1 if strided else _divisor(extent, (config.vector_lanes, config.vector_lanes // 2, 4))
    name = nest.block.name_hint
    _inline_consumers_of(sch, anchor, keep=name)
    loops = sch.get_loops(anchor)
    planes = loops[: n_spatial - 2]
    outer = sch.fuse(*planes) if len(planes) > 1 else planes[0]
    rows, columns, reduce = loops[n_spatial - 2], loops[n_spatial - 1], loops[n_spatial:]
    if lanes > 1:
        col_o, col_i = sch.split(columns, [None, lanes])
        sch.reorder(outer, rows, col_o, *reduce, col_i)
        sch.vectorize(col_i)
    else:
        sch.reorder(outer, rows, columns, *reduce)
    sch.parallel(outer)
    for producer in sch.get_producers(anchor):
        sch.compute_at(producer, outer)
    for consumer in sch.get_consumers(anchor):
        with contextlib.suppress(Exception):
            sch.reverse_compute_at(consumer, outer)
    sch.decompose_reduction(anchor, reduce[0])
    for other in _blocks(sch):
        if not _is_under(sch, other, outer):
            _parallel_block(sch, other, config)
    return True


def _parallel_only(sch, config: CpuScheduleConfig) -> bool:
    _inline_elementwise(sch)
    for block in _blocks(sch):
        _parallel_block(sch, block, config)
    return True


def _parallel_block(sch, block, config: CpuScheduleConfig) -> None:
    """Parallel over the leading spatial loops, vectorized innermost when all spatial."""
    types = _iter_types(sch, block)
    loops = sch.get_loops(block)
    if not loops or len(loops) != len(types):
        return
    lead = 0
    while lead < len(types) and types[lead] == 0:
        lead += 1
    if lead == 0:
        return
    if lead == len(types):  # all spatial: fuse, vectorize the inside, parallel outside
        if _copy_tile(sch, block, loops, config):
            return
        extents = _extents(sch, loops)
        if extents[-1] % config.vector_lanes == 0 and len(loops) > 1:
            # Lanes from the innermost loop alone: split from one loop over the whole
            # block, every vector divided its index back into five coordinates (a 3x3
            # NCHW32c conv of 64 channels at 28x28 with its input padding: 363 -> 345 us).
            outer, inner = sch.split(loops[-1], [None, config.vector_lanes])
            sch.vectorize(inner)
            sch.parallel(sch.fuse(*loops[:-1], outer))
            return
        if extents[-1] % 4 and len(loops) > 2:
            # No vector fits the innermost loop (an RGB image's 3 channels): parallel over
            # the outer loops, the inner ones left nested. One loop over the whole block
            # divided its index back into five coordinates for every element: the 7x7 stem
            # of the transformers' ResNet (3 -> 32 channels at 128x128) spent 97 of its 451
            # us padding its input; 364 us after, 185-205 against 251-268 at 2 threads (AMD
            # EPYC Zen 4, the kernel alone, runs alternating).
            k = 1
            while k < len(loops) - 1 and math.prod(extents[:k]) < _MIN_SHARES:
                k += 1
            sch.parallel(sch.fuse(*loops[:k]) if k > 1 else loops[0])
            return
        fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
        lanes = _divisor(math.prod(extents), (config.vector_lanes, 4))
        if lanes > 1 and extents[-1] % lanes == 0:
            outer, inner = sch.split(fused, [None, lanes])
            sch.vectorize(inner)
            sch.parallel(outer)
        else:
            sch.parallel(fused)
        return
    fused = sch.fuse(*loops[:lead]) if lead > 1 else loops[0]
    sch.parallel(fused)


def _contiguous_var(text: str) -> str | None:
    """The variable an index expression steps through one element at a time: ``v``,
    ``v % B`` or ``x * B + v``; None for anything else."""
    text = text.strip()
    int_ = r"(?:T\.int64\((\d+)\)|(\d+))"
    for pattern in (r"(\w+)", rf"(\w+) % {int_}", rf"\w+ \* {int_} \+ (\w+)"):
        found = re.fullmatch(pattern, text)
        if found:
            names = [g for g in found.groups() if g and not g.isdigit()]
            return names[-1] if names else None
    return None


def _copy_tile(sch, block, loops, config: CpuScheduleConfig) -> bool:
    """A copy whose reads and writes run along different axes (a layout transform between
    channel blocks and NCHW, a transpose) in tiles: a vector of the written axis by a run
    of the read one, so the vector's strided reads come from lines the tile's other
    vectors read too. Vectorized along the loops as they are, each vector gathered or
    scattered over lines that had left L1 by the time the next one came. relax's
    layout_transform and permute_dims as legalized, 2 threads, an Intel Xeon (AVX-512),
    before -> after (us): NCHW to NCHW32c 256 channels at 56x56 1081 -> 238, back 339 ->
    193; NCHW32c to NCHW 64 at 128x128 2651 -> 319; NHWC to NCHW 96 at 56x56 161 -> 53;
    a 768 x 3072 transpose 5995 -> 916. SegFormer's TVM build (blocked): 2.61 -> 1.73 ms."""
    block_ = sch.get(block)
    if len(block_.reads) != 1 or len(block_.writes) != 1:
        return False
    names = [str(iv.var) for iv in block_.iter_vars]
    if len(names) != len(loops) or len(loops) < 2:
        return False
    read_var = _contiguous_var(str(block_.reads[0].region[-1].min))
    write_var = _contiguous_var(str(block_.writes[0].region[-1].min))
    if read_var is None or write_var is None or read_var == write_var:
        return False
    if read_var not in names or write_var not in names:
        return False
    extents = _extents(sch, loops)
    r, w = names.index(read_var), names.index(write_var)
    lanes = _divisor(extents[w], (config.vector_lanes, config.vector_lanes // 2, 4))
    if lanes == 1 or extents[r] < 4:
        return False
    w_o, w_i = sch.split(loops[w], [None, lanes])
    run = _divisor(extents[r], (16, 8)) if extents[r] > 64 else extents[r]
    r_o, r_i = sch.split(loops[r], [None, run]) if run < extents[r] else (None, loops[r])
    outer = []
    for k, loop in enumerate(loops):
        if k == w:
            outer.append(w_o)
        elif k == r:
            if r_o is not None:
                outer.append(r_o)
        else:
            outer.append(loop)
    sch.reorder(*outer, r_i, w_i)
    sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
    sch.vectorize(w_i)
    return True


def _inline_elementwise(sch) -> None:
    changed = True
    while changed:
        changed = False
        for block in _blocks(sch):
            if 2 in _iter_types(sch, block):
                continue
            for inline in (sch.compute_inline, sch.reverse_compute_inline):
                if inline == sch.compute_inline and _broadcast(sch, block):
                    continue
                try:
                    inline(block)
                except Exception:  # noqa: BLE001 - not inlinable here; try the next way
                    continue
                changed = True
                break
            if changed:
                break


def _inline_consumers_of(sch, anchor, keep: str) -> None:
    """Inline elementwise blocks except producers of the anchor (a padded input stays
    materialized: inlined, its bounds check would sit in the innermost loop)."""
    producers = {sch.get(p).name_hint for p in sch.get_producers(anchor)}
    changed = True
    while changed:
        changed = False
        for block in _blocks(sch):
            name = sch.get(block).name_hint
            if name == keep or name in producers or 2 in _iter_types(sch, block):
                continue
            if _broadcast(sch, block):
                continue
            try:
                sch.compute_inline(block)
                changed = True
                break
            except Exception:  # noqa: BLE001 - a consumer of the anchor: fused later
                continue


def _broadcast(sch, block) -> bool:
    """Whether an elementwise consumer of ``block`` runs over at least
    ``_BROADCAST_READS`` times as many points as ``block`` computes: it reads each value
    broadcast, and inlined there the value would be computed again at every point. (A
    reduction reading a padded input nine times, a 3x3 window, keeps it inlined: a
    depthwise conv with its padding materialized measured 216 us, inlined 180.)"""
    size = _points(sch, block)
    return any(
        _points(sch, c) >= _BROADCAST_READS * size
        for c in sch.get_consumers(block)
        if 2 not in _iter_types(sch, c)
    )


def _points(sch, block) -> int:
    return math.prod(_int(iv.dom.extent) for iv in sch.get(block).iter_vars)


def _vectorize_innermost(sch, block, lanes: int) -> None:
    """Vectorize the innermost loop of ``block`` when it is exactly ``lanes`` long."""
    loops = sch.get_loops(block)
    if loops and _int(sch.get(loops[-1]).extent) == lanes:
        with contextlib.suppress(Exception):  # e.g. an epilogue TIR cannot vectorize
            sch.vectorize(loops[-1])


def _fuse_epilogue(sch, writeback) -> None:
    """Inline the anchor's elementwise consumers into its write-back, one at a time."""
    changed = True
    while changed:
        changed = False
        for consumer in sch.get_consumers(writeback):
            try:
                sch.reverse_compute_inline(consumer)
                changed = True
                break
            except Exception:  # noqa: BLE001 - e.g. a reduction consumer: stays separate
                continue


def _is_under(sch, block, loop) -> bool:
    target = sch.get(loop)
    return any(sch.get(lp).same_as(target) for lp in sch.get_loops(block))


def _nbytes(buffer) -> int:
    return math.prod(_int(d) for d in buffer.shape) * max(1, buffer.dtype.bits // 8)


def _divisor(extent: int, candidates) -> int:
    for c in candidates:
        if c > 1 and extent % c == 0:
            return c
    return 1


def _int(value) -> int:
    try:
        return int(value)
    except TypeError:
        return 1
