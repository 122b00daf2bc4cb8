"""Fusing and building every TVM segment of a model; a segment TVM cannot compile
raises :class:`SegmentFailed`, and the compile hands it to onnxruntime."""

from __future__ import annotations

import shutil
from pathlib import Path

from engine.errors import Cancelled, EngineError
from engine.fusion import delegate, forked
from engine.fusion.build import FusedSegment, build_segment, fuse_segment
from engine.fusion.build_cache import BuildCache, build_key, tuned_part
from engine.fusion.conv_layout import NCHW, LayoutUnsupported
from engine.fusion.importer import import_onnx
from engine.fusion.preparation import dtypes
from engine.fusion.target import TargetSpec


class SegmentFailed(Exception):
    """TVM imported ``segment`` but could not fuse or build it."""

    def __init__(self, segment: delegate.Segment, reason: str):
        super().__init__(reason)
        self.segment, self.reason = segment, reason


def fuse_all(
    segments, spec: TargetSpec, node_order, conv_layout: str = NCHW, *, weights: bool = True
) -> dict[int, FusedSegment]:
    """FuseOps over every TVM segment, by segment index, convs in ``conv_layout``
    (:class:`LayoutUnsupported` propagates: the NCHW build stands, see
    ``engine.fusion.conv_layout``); ``weights=False``: to count kernels only (see
    ``build.fuse_segment``)."""
    fused = {}
    for seg in segments:
        if seg.backend == delegate.TVM:
            imported = import_onnx(seg.model, {}, dtypes(seg.model))
            try:
                fused[seg.index] = fuse_segment(
                    imported, spec.tvm_target(), node_order, conv_layout, weights=weights
                )
            except (EngineError, LayoutUnsupported):
                raise
            except Exception as e:  # noqa: BLE001 - TVM raises its own errors
                raise SegmentFailed(seg, failure_reason(e)) from e
            fused[seg.index].segment = seg
    return fused


def build_all(
    fused,
    spec: TargetSpec,
    staging: Path,
    tuned,
    timeout_s: float,
    report,
    cache: BuildCache | None = None,
) -> dict:
    """Build every TVM segment, each in a forked child with a time limit (see ``forked``);
    CUDA builds stay in this process (a CUDA context does not survive a fork). With
    ``cache``, a segment built before (the same module, target, schedules and code) is
    copied from it, and a new build goes in it."""
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    built = {}
    tuned_key = tuned_part(tuned) if cache is not None else None
    for k, (index, seg) in enumerate(fused.items()):
        fraction = 0.7 + 0.1 * k / max(len(fused), 1)
        stem = f"segment{index}"
        key = build_key(seg, spec, tuned, tuned_key) if cache is not None else None
        if key is not None:
            hit = cache.fetch(key, seg, staging, stem)
            if hit is not None:
                report(fraction, f"segment {index}: built before, from the build cache")
                built[index] = hit
                continue
        report(fraction, f"building segment {index}")
        args = (seg, spec, staging, stem, tuned)
        try:
            if spec.kind == "cuda":
                built[index] = build_segment(*args)
            else:

                def waiting(elapsed_s: float, index=index, fraction=fraction) -> None:
                    report(fraction, f"building segment {index} ({elapsed_s:.0f} s)")

                built[index] = forked.call_forked(
                    build_segment, args, timeout_s=timeout_s, poll=waiting
                )
            if key is not None:
                cache.put(key, staging, stem, built[index])
        except forked.ChildTimeout as e:
            raise SegmentFailed(seg.segment, f"TVM's build {e}") from e
        except forked.ChildFailed as e:
            raise SegmentFailed(seg.segment, f"{e.kind}: {e}"[:300]) from e
        except (EngineError, Cancelled):
            raise
        except Exception as e:  # noqa: BLE001 - TVM raises its own errors
            raise SegmentFailed(seg.segment, failure_reason(e)) from e
    return built


def start_build_all(
    fused, spec: TargetSpec, staging: Path, timeout_s: float, cache: BuildCache | None = None
) -> forked.Pending:
    """:func:`build_all` (default schedules) in a forked child of its own, started now and
    returning at once: a second build, on another core, while this process builds the
    first (the other conv layout: DenseNet's two builds took 19 s each, one after the
    other). Its segments' builds are forked children of that child, with their limits."""
    return forked.start_forked(_build_quietly, (fused, spec, staging, timeout_s, cache))


def _build_quietly(fused, spec, staging: Path, timeout_s: float, cache) -> dict:
    return build_all(fused, spec, staging, None, timeout_s, lambda f, m: None, cache)


def failure_reason(e: BaseException) -> str:
    """The error's type and last line, short enough for a report (a forked child's: the
    type it raised there)."""
    if isinstance(e, forked.ChildFailed):
        return f"{e.kind}: {e}"[:300]
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return f"{type(e).__name__}: {lines[-1] if lines else ''}"[:300]
