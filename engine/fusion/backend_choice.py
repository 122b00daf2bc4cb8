"""Each segment on the backend that measured faster, and never a mix slower than
onnxruntime alone.

After the TVM build, every TVM segment is timed both ways on the worker, on the values it
really receives (boundary copies included, as the shipped runtime runs it): its TVM kernels,
and the same subgraph in onnxruntime as it runs inside a mix: on the artifact's threads,
its pool threads blocking when a run returns (see ``standalone.CompiledModel``). A segment that runs
faster in onnxruntime moves there, with both times as the reason; re-partitioning merges it
with its onnxruntime neighbours, so no boundary is added. What stays on TVM keeps its build.

The whole model is then timed against onnxruntime alone at its best thread setting, each in a
fresh process, rounds alternating (:mod:`engine.fusion.fair_timing`); if the mix is not
faster by ``margin``, the artifact becomes onnxruntime alone on the prepared model, and the
result says why. So a compiled artifact is never slower than onnxruntime, within the
measurement's noise, by construction (Collage, PACT'22, chose a backend per subgraph the
same way, by measurement).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.fusion import delegate
from engine.fusion.conv_layout import NCHW, LayoutUnsupported
from engine.fusion.segment_builds import build_all, fuse_all
from engine.fusion.standalone import CompiledModel, ort_session
from engine.fusion.timing import TimingConfig, time_calls

MARGIN = 0.05
"""A segment stays on TVM unless onnxruntime is at least this much faster (the timing's
noise on this kind of machine is a few percent)."""


def beats(ms: float, other_ms: float) -> bool:
    """``ms`` is faster than ``other_ms`` by :data:`MARGIN`: a segment onnxruntime runs
    faster, an artifact faster than onnxruntime alone."""
    return ms < other_ms * (1 - MARGIN)


SEGMENT_TIMING = TimingConfig(min_runs=5, max_runs=200, window_s=0.3)
DECIDE_BY = "min"
"""Each side's fastest run: other load on the machine only adds time, and a median moved
by it flipped choices between two runs of the same compile on this 2-core VM."""


@dataclass(frozen=True)
class SegmentChoice:
    """One TVM segment timed both ways; ``backend`` is where it runs now."""

    nodes: tuple[str, ...]
    tvm_ms: float
    onnxruntime_ms: float
    backend: str

    @property
    def reason(self) -> str:
        faster = "onnxruntime" if self.backend == delegate.ORT else "TVM"
        return (
            f"{faster} measured faster on this segment: TVM {self.tvm_ms:.3f} ms (its faster "
            f"thread setting), onnxruntime {self.onnxruntime_ms:.3f} ms (the artifact's threads, "
            f"as inside a mix), fastest runs on this worker"
        )

    def to_dict(self) -> dict:
        return {
            "nodes": len(self.nodes),
            "first_node": self.nodes[0] if self.nodes else None,
            "tvm_ms": round(self.tvm_ms, 4),
            "onnxruntime_ms": round(self.onnxruntime_ms, 4),
            "backend": self.backend,
            "reason": self.reason,
        }


def time_segments(staging, segments, threads: int, feeds: dict) -> list[SegmentChoice]:
    """Time every TVM segment of the build in ``staging`` both ways, in the order the
    model runs them, on the values the earlier segments produced. TVM's time is its
    faster of 1 and ``threads`` threads: the artifact ships on its fastest setting (a
    small model's kernels run faster on one thread than split over two)."""
    tvm_ms: dict[int, float] = {}
    for setting in sorted({1, threads}):  # TVM's pool is one per process: a setting at a time
        compiled = CompiledModel(staging, threads=setting)
        values = dict(feeds)
        for runtime, segment in zip(compiled.segments, segments, strict=True):
            if segment.backend == delegate.TVM:
                ms = time_calls(lambda r=runtime, v=values: r.run(v), SEGMENT_TIMING)[DECIDE_BY]
                tvm_ms[segment.index] = min(ms, tvm_ms.get(segment.index, ms))
            values.update(runtime.run(values))
    values = dict(feeds)
    choices = []
    for runtime, segment in zip(compiled.segments, segments, strict=True):
        if segment.backend == delegate.TVM:
            session = ort_session(segment.model.SerializeToString(), threads, spin_stop=True)
            inputs = {n: values[n] for n in segment.inputs}
            ort_ms = time_calls(lambda s=session, i=inputs: s.run(None, i), SEGMENT_TIMING)[
                DECIDE_BY
            ]
            faster = beats(ort_ms, tvm_ms[segment.index])
            choices.append(
                SegmentChoice(
                    tuple(segment.nodes),
                    tvm_ms[segment.index],
                    ort_ms,
                    delegate.ORT if faster else delegate.TVM,
                )
            )
        values.update(runtime.run(values))
    return choices


def moved_to_onnxruntime(choices: list[SegmentChoice]) -> dict[str, str]:
    """Node -> reason, for the nodes of every segment that moves to onnxruntime."""
    return {
        node: choice.reason
        for choice in choices
        if choice.backend == delegate.ORT
        for node in choice.nodes
    }


def same_tvm_segments(old, new) -> dict[int, int] | None:
    """New segment index -> old index for every TVM segment of ``new``, when each has the
    nodes of a segment of ``old`` (its build can be kept); ``None`` otherwise."""
    by_nodes = {tuple(s.nodes): s.index for s in old if s.backend == delegate.TVM}
    mapping = {}
    for segment in new:
        if segment.backend == delegate.TVM:
            found = by_nodes.get(tuple(segment.nodes))
            if found is None:
                return None
            mapping[segment.index] = found
    return mapping


def mix_wins(result: dict) -> bool:
    """The mix beat onnxruntime alone by the margin a segment needs too, in every timing
    of it (a close win is timed twice: :func:`engine.fusion.measurement.measure`)."""
    timing = result.get("timing")
    if not timing:
        return True  # not timed: nothing says otherwise
    return all(timing_wins(t) for t in each_timing(timing))


def timing_wins(timing: dict) -> bool:
    """One timing's artifact beat onnxruntime by the margin on each side's fastest round
    and on the median of the rounds' own speeds, where it has them
    (:func:`engine.fusion.fair_timing.round_speeds`: each side's fastest round can fall on
    different speeds of the machine)."""
    speed = timing.get("round_speed")
    return beats(timing["latency_ms"], timing["onnxruntime_latency_ms"]) and (
        speed is None or beats(1.0, speed)
    )


def each_timing(timing: dict) -> list[dict]:
    """Every timing of a compile result's ``timing``: a close win was timed twice."""
    return timing.get("timings") or [timing]


def repartition(
    model, fallback, segments, fused, built, spec, staging, tuned, config, report, conv_layout
):
    """Segments after more nodes moved to onnxruntime; TVM segments whose nodes did not
    change keep their build (else everything is built again, convs in ``conv_layout``)."""
    new = delegate.partition(model, set(fallback))
    mapping = same_tvm_segments(segments, new)
    if mapping is None:
        node_order = [n.name for n in model.graph.node]
        try:
            fused = fuse_all(new, spec, node_order, conv_layout)
        except LayoutUnsupported:  # a smaller segment can end at an operator blocks stop
            fused = fuse_all(new, spec, node_order, NCHW)
        return (
            new,
            fused,
            build_all(
                fused, spec, staging, tuned, config.build_timeout_s, report, config.build_cache
            ),
        )
    kept_fused, kept_built = {}, {}
    for index, old in mapping.items():
        kept_fused[index], kept_built[index] = fused[old], built[old]
        kept_fused[index].segment = new[index]
    return new, kept_fused, kept_built
