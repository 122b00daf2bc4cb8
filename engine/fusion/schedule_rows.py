"""Default CPU schedule for row-wise kernels: softmax, layer norm, a mean over the last
axis, with what FuseOps put around them.

Such a kernel is a few reductions over the innermost axis of the same rows, then an
elementwise block that writes the rows out. As written by TOPI, each reduction is a loop
nest of its own over all rows with a scalar inner loop, and the output block a third pass
(softmax 1x4x128x128: 4.6x onnxruntime's time on one thread; ViT's 6x197x197: 12x; layer
norm over 384: 3.7x). Here the rows run in parallel, each row computes its reductions
next to its output (the row stays in cache, Souffle's "reduction fused with its producers
and consumers"), every reduction is split into vector lanes of partial results (rfactor:
floating-point sums are not reassociated by the compiler on its own), and the output is
written vectorized.
"""

from __future__ import annotations

import contextlib


def row_reduction(sch, config) -> bool:
    """Schedule ``sch`` as a row-wise kernel, if it is one."""
    from engine.fusion.schedules import _blocks, _extents, _int, _iter_types

    blocks = _blocks(sch)
    if len(blocks) < 2:
        return False
    for block in blocks[:-1]:  # elementwise steps (delta, exp) are computed where read
        if 2 not in _iter_types(sch, block):
            with contextlib.suppress(Exception):
                sch.compute_inline(block)
    blocks = _blocks(sch)
    out = blocks[-1]
    out_types = _iter_types(sch, out)
    if 2 in out_types or len(out_types) < 2:
        return False
    rows = len(out_types) - 1
    width = _int(sch.get(out).iter_vars[-1].dom.extent)
    if width < config.vector_lanes:
        return False
    for block in blocks[:-1]:  # each: the rows, then the one reduced axis, as wide
        types = _iter_types(sch, block)
        extents = [_int(iv.dom.extent) for iv in sch.get(block).iter_vars]
        if types != [0] * rows + [2] or extents[-1] != width:
            return False
    if len(sch.get_loops(out)) != rows + 1:
        return False
    lanes = _lanes(width, config.vector_lanes)
    partials = []
    if lanes > 1:  # each reduction into lanes of partial results, then across the lanes
        for block in blocks[:-1]:
            _, lane = sch.split(sch.get_loops(block)[-1], [None, lanes])
            partials.append(sch.rfactor(lane, 0))
    loops = sch.get_loops(out)
    row_loop = sch.fuse(*loops[:rows]) if rows > 1 else loops[0]
    for block in reversed(_blocks(sch)[:-1]):
        sch.compute_at(block, row_loop, preserve_unit_loops=True)
    sch.parallel(row_loop)
    for partial in partials:  # the lanes innermost, inside the loop over the row
        loops = sch.get_loops(partial)[1:]  # below the row loop: lanes, unit loops, the row
        lane = next(lp for lp in loops if _extents(sch, [lp])[0] == lanes)
        if not sch.get(lane).same_as(sch.get(loops[-1])):
            sch.reorder(loops[-1], lane)
        sch.vectorize(lane)
    out_loop = sch.get_loops(out)[-1]
    if lanes > 1 and _extents(sch, [out_loop])[0] % lanes == 0:
        _, lane = sch.split(out_loop, [None, lanes])
        with contextlib.suppress(Exception):
            sch.vectorize(lane)
    return True


def _lanes(width: int, lanes: int) -> int:
    for candidate in (lanes, lanes // 2, 4):
        if candidate > 1 and width % candidate == 0:
            return candidate
    return 1
