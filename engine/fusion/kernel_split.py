"""Kernels onnxruntime runs faster move there, where the saving pays for the boundaries.

The segment-level choice (``backend_choice``) only moves whole segments, and a model TVM
imports whole is one segment: it runs all in TVM or all in onnxruntime. Inside it, some
kernels can be far faster in one backend than the other (onnxruntime's MLAS convs against
TVM's untuned ones; a weight-bound product TVM reads in panels). So each TVM kernel is
priced both ways on this worker, at the artifact's threads:

- TVM: the kernel's own time, from the VM's instrument around every kernel launch,
  scaled to add up to a plain run of its segment (:func:`tvm_kernel_times`);
- onnxruntime: the time of the ONNX nodes the kernel runs, from onnxruntime's profiler on
  the model at optimization level ``basic`` (every node its own kernel), scaled to a
  default session's whole-model time (:func:`onnxruntime_node_times`). A kernel with a
  node the profile does not show is not priced: it stays on TVM.

A dynamic program over the kernels in launch order then picks each kernel's backend so
that the kernels' times plus the cost of every switch between the backends is least. A
switch costs a runtime call (``SWITCH_US``) plus the tensor crossing it at
``SWITCH_GBPS``. Only a plan predicted to save at least ``MIN_GAIN`` of the TVM time,
and to run faster than the whole model in onnxruntime alone (its plain session's time:
onnxruntime alone is timed at the end of the compile and ships before any mix not faster
than it), is built; the compile then times the new build against the one it had, in one
process, rounds alternating, and keeps the split only if it measured faster by ``KEEP_MARGIN``:
the prediction chooses what to try, a measurement what ships. The whole-model check
against onnxruntime alone (``backend_choice``) still follows.
"""

from __future__ import annotations

import functools
import math
import shutil
import statistics
from dataclasses import asdict, dataclass, replace
from itertools import pairwise
from pathlib import Path

import numpy as np
import onnx

from engine.errors import Cancelled, EngineError
from engine.fusion.segment_builds import failure_reason
from engine.fusion.timing import TimingConfig, kernel_times_us, time_calls

SWITCH_US = 30.0
"""A switch of backend inside a segment: one more onnxruntime ``run`` and TVM VM call, on
this kind of machine (the mixed LSTM's 4 switches cost about 0.1 ms)."""
SWITCH_GBPS = 2.0
"""The tensor at a switch, at this rate: onnxruntime reorders a conv's input into its
own channel blocks and back, and a blocked TVM build does the same into its own, so the
tensor is read and written about four times."""
MIN_GAIN = 0.15
"""A plan must save this share of the segment's TVM time to be built and measured: the
prediction prices each side alone and misses what a cut loses (a fusion across it, the
layouts on both sides); at 5% it chose splits that measured 9-10% slower (ResNet-50,
VGG-16)."""
MAX_WEIGHT_BYTES = 256 << 20
"""Above this much weight, the split is not tried: onnxruntime's profile and a second
build of such a model (VGG-16) cost half a minute of a compile."""
KEEP_MARGIN = 0.03
"""The split build ships if it measured this much faster than the build it replaces."""


@dataclass(frozen=True)
class Build:
    """A compile's TVM build as the split needs it."""

    segments: list
    fused: dict
    built: dict
    staging: Path
    spec: object
    layout: str
    tuned: object
    config: object  # the compile's CompileConfig

    def replace(self, segments, fused, built) -> Build:
        return replace(self, segments=segments, fused=fused, built=built)


@dataclass(frozen=True)
class KernelPrice:
    """One TVM kernel priced both ways; ``onnxruntime_us`` None: not priced (stays)."""

    segment: int
    funcs: tuple[str, ...]
    """The TVM kernels this row prices together, in launch order (:func:`units`)."""
    nodes: tuple[str, ...]
    tvm_us: float | None
    onnxruntime_us: float | None
    switch_us: float
    backend: str = "tvm"

    @property
    def func(self) -> str:
        return " + ".join(self.funcs)

    @property
    def kernels(self) -> int:
        return len(self.funcs)

    def to_dict(self) -> dict:
        return asdict(self) | {
            "nodes": list(self.nodes),
            "funcs": list(self.funcs),
            "func": self.func,
            "kernels": self.kernels,
        }


@dataclass
class SplitPlan:
    """The kernels of every TVM segment with the backend the program chose for each."""

    prices: list[KernelPrice]
    tvm_us: float  # the timed kernels of the segments, all on TVM
    planned_us: float  # the same with the plan's choices and switches
    threads: int
    onnxruntime_us: float | None = None
    """The whole model in a plain onnxruntime session on this worker (None: not timed)."""

    @property
    def moved(self) -> list[KernelPrice]:
        return [p for p in self.prices if p.backend == "onnxruntime"]

    @property
    def worth_building(self) -> bool:
        return bool(self.moved) and self.saves_enough and not self.behind_onnxruntime

    @property
    def saves_enough(self) -> bool:
        return self.planned_us < self.tvm_us * (1 - MIN_GAIN)

    @property
    def behind_onnxruntime(self) -> bool:
        """The plan is predicted no faster than onnxruntime alone on the whole model, which
        the compile times at its end and ships before a mix that does not beat it: such a
        split cannot ship. DenseNet-121 on an AMD EPYC Zen 3 (AVX2): its plan moved one
        unit holding 74 of the 80 ms of TVM kernels (60.6 ms planned, onnxruntime alone
        57.5); the split took 45 s to build and ran 132 ms against 81. Over 16 splits
        built in three runs of the 36 models (Zen 3, Zen 4, a Xeon), each of the 7 planned
        at or above onnxruntime's time shipped onnxruntime alone."""
        return self.onnxruntime_us is not None and self.planned_us >= self.onnxruntime_us

    def reasons(self) -> dict[str, str]:
        """Node -> why it moves, for every node of a moved kernel."""
        return {
            node: (
                f"onnxruntime is faster on the TVM kernel{'s' if p.kernels > 1 else ''} that "
                f"run{'' if p.kernels > 1 else 's'} this node ({p.func}): TVM {p.tvm_us:.1f} us,"
                f" onnxruntime {p.onnxruntime_us:.1f} us for its nodes ({self.threads} "
                f"thread(s), this worker's per-kernel and per-node profiles)"
            )
            for p in self.moved
            for node in p.nodes
        }

    def to_dict(self) -> dict:
        return {
            "method": (
                "TVM kernels timed with the VM's instrument, onnxruntime's nodes with its "
                f"profiler, both on this worker at {self.threads} thread(s), each side scaled "
                "to add up to a plain run's median where it added up to more; a dynamic "
                f"program with {SWITCH_US:.0f} us plus the crossing tensor at "
                f"{SWITCH_GBPS:.0f} GB/s per switch"
            ),
            "predicted": True,
            "tvm_us": round(self.tvm_us, 1),
            "planned_us": round(self.planned_us, 1),
            "onnxruntime_us": None
            if self.onnxruntime_us is None
            else round(self.onnxruntime_us, 1),
            "kernels": [p.to_dict() for p in self.prices],
            "moved": [p.to_dict() for p in self.moved],
        }


def plan_split(
    calls_by_segment: dict,
    tvm_times: dict,
    ort_us: dict,
    threads: int,
    open_ends: dict[int, tuple[bool, bool]] | None = None,
    onnxruntime_us: float | None = None,
) -> SplitPlan:
    """``calls_by_segment``: segment index -> its ``KernelCall`` list in launch order;
    ``tvm_times``: segment index -> ``{(func, occurrence): us}``; ``ort_us``: ONNX node ->
    onnxruntime time in us (None where its profile could not tell); ``open_ends``: segment
    index -> (it reads only the model's inputs, it writes only the model's outputs): no
    TVM neighbour there, so starting or ending on onnxruntime crosses nothing (GPT-2's
    vocabulary projection, 0.9 ms in TVM against 0.43 in onnxruntime, writes the logits);
    ``onnxruntime_us``: the whole model in a plain onnxruntime session (None: unknown)."""
    prices, total, planned = [], 0.0, 0.0
    for index, calls in calls_by_segment.items():
        times = tvm_times.get(index, {})
        seen: dict[str, int] = {}
        kernel_us = []
        for call in calls:
            occurrence = seen.get(call.func, 0)
            seen[call.func] = occurrence + 1
            kernel_us.append(times.get((call.func, occurrence)))
        rows = [
            _unit_price(index, [calls[k] for k in unit], [kernel_us[k] for k in unit], ort_us)
            for unit in units(calls)
        ]
        ends = (open_ends or {}).get(index, (False, False))
        chosen = _program(rows, *ends)
        prices += chosen
        total += math.fsum(r.tvm_us for r in rows if r.tvm_us is not None)
        planned += _cost(chosen, *ends)
    return SplitPlan(prices, total, planned, threads, onnxruntime_us)


def units(calls: list) -> list[list[int]]:
    """The kernels (indices into ``calls``, in launch order) that move together: those that
    share an ONNX node, with every kernel launched between them. The split moves whole
    nodes, so a node lowered to several kernels (a Winograd conv's input transform, product
    and output transform; a softmax's or a layer norm's reductions) runs all of them on one
    side. Priced kernel by kernel, each was set against the whole node's onnxruntime time:
    onnxruntime's side counted once per kernel, and a plan that moved them predicted that
    much too slow."""
    last = {n: k for k, call in enumerate(calls) for n in call.nodes}
    found, start = [], 0
    while start < len(calls):
        end = max((last[n] for n in calls[start].nodes), default=start)
        k = start
        while k < end:
            k += 1
            end = max([end, *(last[n] for n in calls[k].nodes)])
        found.append(list(range(start, end + 1)))
        start = end + 1
    return found


def _unit_price(segment: int, calls: list, kernel_us: list, ort_us: dict) -> KernelPrice:
    """One unit of kernels (:func:`units`) priced both ways: its kernels' TVM times (None: no
    kernel launched, a view), onnxruntime's times for its nodes, each counted once (None:
    a node the profile could not tell, or no node at all: it stays on TVM); a switch after
    it carries its last kernel's output."""
    nodes = list(dict.fromkeys(n for call in calls for n in call.nodes))
    known = [t for t in kernel_us if t is not None]
    node_times = [ort_us.get(n) for n in nodes]
    return KernelPrice(
        segment,
        tuple(call.func for call in calls),
        tuple(nodes),
        math.fsum(known) if known else None,
        math.fsum(node_times) if nodes and None not in node_times else None,
        SWITCH_US + calls[-1].bytes_out / (SWITCH_GBPS * 1e3),
    )


def _cost_on(row: KernelPrice, backend: str) -> float:
    if row.tvm_us is None:  # no kernel launched (a view): free on either side
        return 0.0
    if backend == "tvm":
        return row.tvm_us
    return math.inf if row.onnxruntime_us is None else row.onnxruntime_us


def _program(
    rows: list[KernelPrice], open_start: bool = False, open_end: bool = False
) -> list[KernelPrice]:
    """Each row's backend, least total time with switches; the segment starts and ends
    on TVM (its neighbours' boundaries are already paid for), except at an open end: the
    model's inputs or outputs, which either backend reads or writes as they are."""
    backends = ("tvm", "onnxruntime")
    if not rows:
        return []
    start = 0.0 if open_start else rows[0].switch_us
    best = {b: (_cost_on(rows[0], b) + (0 if b == "tvm" else start), [b]) for b in backends}
    for prev, row in pairwise(rows):
        step = {}
        for b in backends:
            options = [
                (cost + (0.0 if a == b else prev.switch_us) + _cost_on(row, b), path)
                for a, (cost, path) in best.items()
            ]
            cost, path = min(options, key=lambda o: o[0])
            step[b] = (cost, [*path, b])
        best = step
    end = 0.0 if open_end else rows[-1].switch_us
    ends = [(cost + (0.0 if b == "tvm" else end), path) for b, (cost, path) in best.items()]
    _, path = min(ends, key=lambda o: o[0])
    return [_with(row, b) for row, b in zip(rows, path, strict=True)]


def _with(row: KernelPrice, backend: str) -> KernelPrice:
    return replace(row, backend=backend)


def _cost(rows: list[KernelPrice], open_start: bool = False, open_end: bool = False) -> float:
    cost = math.fsum(_cost_on(r, r.backend) for r in rows)
    for a, b in pairwise(rows):
        cost += a.switch_us if a.backend != b.backend else 0.0
    if rows and rows[0].backend != "tvm" and not open_start:
        cost += rows[0].switch_us
    if rows and rows[-1].backend != "tvm" and not open_end:
        cost += rows[-1].switch_us
    return cost


def tvm_kernel_times(
    staging, fused, built, threads: int, feeds: dict, runs: int = 5, window_s: float = 0.3
) -> dict:
    """Segment index -> ``{(func, occurrence): us}`` of the build in ``staging``, each
    segment run alone on the values the segments before it produce.

    The VM's instrument calls back into Python before and after every launch, and its
    kernels' times add up to more than a plain run of the segment takes (vit_ts: 1.41 ms
    against 1.26, gpt2_dynamo 5.1 against 4.2 on an EPYC; about 2-7 us per launch, from
    the callbacks and the caches and pool threads they disturb). So, as onnxruntime's
    profile is, the times are scaled to add up to the segment's plain median, timed right
    after; that median also holds what is not a kernel (the VM, its inputs and outputs),
    so the scale errs high: it never makes TVM look cheaper than it is."""
    from engine.fusion.standalone import CompiledModel

    compiled = CompiledModel(staging, threads=threads)
    order = iter(fused)
    times, values = {}, dict(feeds)
    for runtime in compiled.segments:
        if hasattr(runtime, "vm"):
            index = next(order)
            run = functools.partial(runtime.run, dict(values))
            kernels = kernel_times_us(runtime.vm, run, built[index].kernel_names, runs)
            plain_us = time_calls(run, TimingConfig(5, 200, window_s))["median"] * 1e3
            times[index] = scaled_to(kernels, plain_us)
        values.update(runtime.run(values))
    return times


def _least(*times: float | None) -> float | None:
    """The smallest of the times known (None: none is)."""
    return min((t for t in times if t is not None), default=None)


def _faster_each(first: dict, second: dict) -> dict:
    """``{key: us}``: each time the smaller of its two timings (None, or missing in one:
    the other's)."""
    return {key: _least(first.get(key), second.get(key)) for key in first.keys() | second.keys()}


def _faster(first: dict, second: dict) -> dict:
    """``{group: {key: us}}``: :func:`_faster_each` group by group."""
    return {
        group: _faster_each(first.get(group) or {}, second.get(group) or {})
        for group in first.keys() | second.keys()
    }


def scaled_to(kernel_us: dict, plain_us: float) -> dict:
    """``kernel_us`` scaled down to add up to ``plain_us`` where they add up to more."""
    total = math.fsum(kernel_us.values())
    scale = min(1.0, plain_us / total) if total > 0 else 1.0
    return {key: us * scale for key, us in kernel_us.items()}


def onnxruntime_node_times(
    model, threads: int, feeds: dict, window_s: float = 0.5
) -> tuple[dict[str, float | None], float | None]:
    """(ONNX node -> onnxruntime's time for it in us at ``threads``, from its profiler,
    None for a node the profile does not show (its kernel then stays on TVM); the whole
    model's time in us in a plain default session, None when the profile showed no node).

    The profile runs at optimization level ``basic``: no fusion there, so each node keeps
    its own kernel and name (at ``extended`` and ``all`` onnxruntime fuses and renames).
    Its fusions and layouts make the default session faster, and the profiler costs time
    of its own (ViT's nodes added up to 3.5 ms where a plain run took 1.7 ms, ResNet-50's
    to 61 ms where a default session took 42): the times are scaled to add up to a plain
    default session's median on ``feeds``, timed right after."""
    import json
    import tempfile

    import onnxruntime as ort

    from engine.fusion.standalone import ort_session

    data = model.SerializeToString()
    wanted = {i.name for i in model.graph.input}
    inputs = {name: value for name, value in feeds.items() if name in wanted}
    with tempfile.TemporaryDirectory(prefix="workbench-split-") as tmp:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.intra_op_num_threads = threads
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(tmp) / "ort")
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        time_calls(lambda: session.run(None, inputs), TimingConfig(5, 200, window_s))
        events = json.loads(Path(session.end_profiling()).read_text())
    samples: dict[str, list[float]] = {}
    for event in events:
        name = event.get("name", "")
        if event.get("cat") == "Node" and name.endswith(_KERNEL_EVENT):
            samples.setdefault(name[: -len(_KERNEL_EVENT)], []).append(float(event["dur"]))
    times = {
        n.name: statistics.median(samples[n.name]) if n.name in samples else None
        for n in model.graph.node
    }
    profiled_us = math.fsum(t for t in times.values() if t)
    if not profiled_us:
        return times, None
    plain = ort_session(data, threads, spin_stop=False)
    plain_ms = time_calls(lambda: plain.run(None, inputs), TimingConfig(5, 200, window_s))
    # where a node is not shown, the plain run's time holds it too: the scale errs high
    plain_us = plain_ms["median"] * 1e3
    scale = min(1.0, plain_us / profiled_us)
    return {name: None if t is None else t * scale for name, t in times.items()}, plain_us


_KERNEL_EVENT = "_kernel_time"


def with_observed_types(model, names, feeds: dict, threads: int):
    """``model`` with a type and shape for each of ``names`` that has none (shape inference
    could not tell: GPT-2's reshapes of computed shapes), read off one onnxruntime run on
    ``feeds`` with them as extra outputs; ``model`` itself when every one has a type. An
    onnxruntime segment cannot read an input without one."""
    import onnxruntime as ort
    from onnx import helper

    graph = model.graph
    typed = {
        v.name
        for v in (*graph.input, *graph.value_info, *graph.output)
        if v.type.tensor_type.elem_type
    }
    typed |= {t.name for t in graph.initializer}
    missing = sorted(n for n in names if n and n not in typed)
    if not missing:
        return model
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in missing)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or 0
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        probe.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    wanted = {i.name for i in graph.input}
    values = session.run(missing, {k: v for k, v in feeds.items() if k in wanted})
    result = onnx.ModelProto()
    result.CopyFrom(model)
    for name, value in zip(missing, map(np.asarray, values), strict=True):
        elem = helper.np_dtype_to_tensor_dtype(value.dtype)
        result.graph.value_info.append(helper.make_tensor_value_info(name, elem, value.shape))
    return result


def split_kernels(build, model, fallback: dict, feeds: dict, write_manifest, report, stored=None):
    """Try the plan on the build in ``build.staging``; returns what to ship and the
    report. ``build`` holds ``segments``, ``fused``, ``built``, ``staging``, ``spec``,
    ``layout``, ``tuned`` and ``config`` (see ``engine.fusion.compile``);
    ``write_manifest(directory, segments, built, fallback)`` writes a build's manifest.

    ``stored``: a :class:`StoredSplit`. The verdict a compile of the same build stored is
    taken instead of pricing, building and timing the split again (a second compile of a
    tuned model: ResNet-50's split was tried, built and timed in 19 s, kept in one compile
    and dropped in the next); a split kept there is built again (its segments from the
    build cache) and its outputs checked, not timed. A verdict reached here is stored."""
    earlier = stored.get() if stored is not None else None
    nodes = {n.name for n in model.graph.node}
    if earlier is not None and set(earlier[1]) <= nodes:
        result, moved = earlier
        if not result.get("kept"):
            return build, fallback, {**result, "stored": True}
        shipped = dict(fallback) | moved
        report(0.82, f"building the split an earlier compile kept: {len(moved)} node(s)")
        try:
            directory, segments, fused, built, models = _build_split(
                build, model, shipped, feeds, write_manifest, report
            )
        except _SplitFailed:
            pass  # the stored split no longer builds or agrees here: decided again below
        else:
            del models
            shutil.rmtree(build.staging)
            directory.rename(build.staging)
            return build.replace(segments, fused, built), shipped, {**result, "stored": True}
    new, shipped, result, decided = _split_kernels(
        build, model, fallback, feeds, write_manifest, report
    )
    if stored is not None and decided:
        stored.put(result, {n: r for n, r in shipped.items() if n not in fallback})
    return new, shipped, result


class StoredSplit:
    """The kernel split's verdict on one build (the model, how it was compiled, its conv
    layout and tuned kernels: ``key``) on one target, in the tuning store: what the
    report said and the nodes the split moved to onnxruntime (none unless kept)."""

    KIND = "kernel-split"

    def __init__(self, store, target_key: str, key: str, spec):
        self.store, self.target_key, self.key, self.spec = store, target_key, key, spec

    def get(self) -> tuple[dict, dict[str, str]] | None:
        """(the report, the nodes moved), or None if none is stored or it is damaged."""
        try:
            entry = self.store.get(self.target_key, self.key)
            if not entry or entry.get("kind") != self.KIND:
                return None
            result, moved = dict(entry["result"]), dict(entry["moved"])
            if not isinstance(result.get("kept"), bool) or result["kept"] != bool(moved):
                return None
            if not all(isinstance(n, str) and isinstance(r, str) for n, r in moved.items()):
                return None
        except Exception:  # noqa: BLE001 - a damaged or foreign entry: decided again
            return None
        return result, moved

    def put(self, result: dict, moved: dict[str, str]) -> None:
        """Store a verdict reached here. A store that fails leaves the compile as is (the
        next compile decides again) and ``result`` says why."""
        from engine.fusion.whole_model_check import put_whole_model_entry

        kept = bool(result.get("kept"))
        kernel = f"whole model: kernel split ({'kept' if kept else 'not kept'})"
        payload = {"result": result, "moved": moved if kept else {}}
        error = put_whole_model_entry(self, self.KIND, kernel, payload)
        if error:  # the verdict stands; the next compile decides again
            result["store_error"] = error


class _SplitFailed(Exception):
    """The split did not build, run or agree with the build: the reason, and whether it
    was built."""

    def __init__(self, reason: str, built: bool):
        super().__init__(reason)
        self.built = built


def _build_split(build, model, moved: dict, feeds: dict, write_manifest, report):
    """The split that runs ``moved`` (node -> reason) in onnxruntime, built beside
    ``build.staging`` and its outputs checked against the build's: ``(directory,
    segments, fused, built, the two builds loaded)``; raises :class:`_SplitFailed`."""
    from engine.fusion import delegate
    from engine.fusion.conv_layout import NCHW, LayoutUnsupported
    from engine.fusion.segment_builds import SegmentFailed, build_all, fuse_all
    from engine.fusion.whole_model_check import load_pair, outputs_agree

    node_order = [n.name for n in model.graph.node]
    segments = delegate.partition(model, set(moved))
    crossing = {t for seg in segments for t in (*seg.inputs, *seg.outputs)}
    try:
        typed = with_observed_types(model, crossing, feeds, build.spec.threads)
    except Exception as e:  # noqa: BLE001 - onnxruntime could not run the model so
        reason = f"the split's crossing tensors have no type: {failure_reason(e)}"
        raise _SplitFailed(reason, built=False) from e
    if typed is not model:  # a tensor now crossing had no type: onnxruntime needs one
        model = typed
        segments = delegate.partition(model, set(moved))
    directory = build.staging.parent / "split"
    try:
        try:
            fused = fuse_all(segments, build.spec, node_order, build.layout)
        except LayoutUnsupported:
            fused = fuse_all(segments, build.spec, node_order, NCHW)
        built = build_all(
            fused,
            build.spec,
            directory,
            build.tuned,
            build.config.build_timeout_s,
            report,
            build.config.build_cache,
        )
    except SegmentFailed as e:
        shutil.rmtree(directory, ignore_errors=True)
        raise _SplitFailed(f"the split did not build: {e.reason}", built=False) from e
    write_manifest(directory, segments, built, moved)
    try:
        models = load_pair(build.staging, directory, build.spec)
        agree, worst = outputs_agree(models, build.config)
    except Exception as e:  # noqa: BLE001 - onnxruntime or TVM refused the split: it goes
        if isinstance(e, EngineError | Cancelled):
            raise
        shutil.rmtree(directory, ignore_errors=True)
        raise _SplitFailed(f"the split did not run: {failure_reason(e)}", built=True) from e
    if not agree:
        del models
        shutil.rmtree(directory, ignore_errors=True)
        reason = f"the split's outputs differ from the build's by {worst:.3g}"
        raise _SplitFailed(reason, built=True)
    return directory, segments, fused, built, models


def _split_kernels(build, model, fallback: dict, feeds: dict, write_manifest, report):
    """:func:`split_kernels`'s decision: what to ship, the report, and whether it is a
    verdict to store (a plan not worth building, or a split measured; not a failure)."""
    from engine.fusion.whole_model_check import CHECK_ROUNDS, time_alternating

    threads = build.spec.threads
    weights = sum(t.ByteSize() for t in model.graph.initializer)
    if weights > MAX_WEIGHT_BYTES:
        reason = (
            f"not tried: {weights / 2**20:.0f} MB of weights (over {MAX_WEIGHT_BYTES >> 20} MB)"
        )
        return build, fallback, {"tried": False, "reason": reason}, False
    report(0.8, "timing every TVM kernel")
    tvm_times = tvm_kernel_times(build.staging, build.fused, build.built, threads, feeds)
    report(0.81, "profiling the same nodes in onnxruntime")
    ort_us, ort_whole_us = onnxruntime_node_times(model, threads, feeds)
    inputs = {i.name for i in model.graph.input}
    outputs = {o.name for o in model.graph.output}
    open_ends = {
        i: (set(s.segment.inputs) <= inputs, set(s.segment.outputs) <= outputs)
        for i, s in build.fused.items()
    }
    calls = {i: s.calls for i, s in build.fused.items()}
    plan = plan_split(calls, tvm_times, ort_us, threads, open_ends, ort_whole_us)
    first = None
    if plan.worth_building:
        # Priced on one timing of each side, a plan can be a burst of other load: DenseNet-
        # 121's kernels timed in a slow spell of the machine (55 ms where a run takes 30)
        # priced two kernels 21 ms cheaper in onnxruntime; its split took 26 s to build and
        # ran 78 ms against 48. Before a build, both sides are timed again and each kernel
        # and node priced at the faster of its two timings (other load only adds time).
        report(0.815, "timing the kernels and nodes again before building the split")
        first = plan
        tvm_times = _faster(
            tvm_times, tvm_kernel_times(build.staging, build.fused, build.built, threads, feeds)
        )
        again, again_whole_us = onnxruntime_node_times(model, threads, feeds)
        ort_us = _faster_each(ort_us, again)
        ort_whole_us = _least(ort_whole_us, again_whole_us)
        plan = plan_split(calls, tvm_times, ort_us, threads, open_ends, ort_whole_us)
    result = plan.to_dict() | {"tried": True, "built": False, "kept": False}
    if first is not None:
        result["timed_twice"] = {
            "first_tvm_us": round(first.tvm_us, 1),
            "first_planned_us": round(first.planned_us, 1),
            "method": "a plan worth building is priced again, each kernel and node at the "
            "faster of two timings, and built only if it still is",
        }
    if not plan.worth_building:
        if not plan.moved:
            why = "no kernel moves"
        elif not plan.saves_enough:
            why = f"the plan saves less than {MIN_GAIN:.0%} of the TVM kernels' time"
        else:
            why = (
                f"the plan ({plan.planned_us / 1e3:.3f} ms) is no faster than the whole model "
                f"in onnxruntime alone ({plan.onnxruntime_us / 1e3:.3f} ms, a plain session at "
                f"{threads} thread(s) on this worker), which ships before such a mix"
            )
        result["reason"] = why + (
            ""
            if first is None
            else f" when timed again (the first timing: {first.planned_us / 1e3:.3f} against "
            f"{first.tvm_us / 1e3:.3f} ms)"
        )
        return build, fallback, result, True
    moved = dict(fallback) | plan.reasons()
    report(0.82, f"building the split: {len(plan.moved)} kernel(s) to onnxruntime")
    try:
        directory, segments, fused, built, models = _build_split(
            build, model, moved, feeds, write_manifest, report
        )
    except _SplitFailed as e:  # not stored: a loaded machine's build timeout is no verdict
        result["built"], result["reason"] = e.built, str(e)
        return build, fallback, result, False
    result["built"] = True
    try:
        before, after, runs = time_alternating(
            build.staging, directory, build.spec, build.config, report, "timing the split", models
        )
        del models
    except Exception as e:  # noqa: BLE001 - onnxruntime or TVM refused the split: it goes
        if isinstance(e, EngineError | Cancelled):
            raise
        result["reason"] = f"the split did not run: {failure_reason(e)}"
        shutil.rmtree(directory, ignore_errors=True)
        return build, fallback, result, False
    result["measured_ms"] = {
        "before": round(before, 4),
        "after": round(after, 4),
        "method": (
            f"median of up to {CHECK_ROUNDS} alternating rounds in one process, at least "
            f"{runs} runs each, {threads} thread(s)"
        ),
    }
    if after >= before * (1 - KEEP_MARGIN):
        result["reason"] = (
            f"the split measured {after:.3f} ms against {before:.3f} ms: not "
            f"{KEEP_MARGIN:.0%} faster, the build stays as it was"
        )
        shutil.rmtree(directory, ignore_errors=True)
        return build, fallback, result, True
    result["kept"] = True
    result["reason"] = f"the split measured {after:.3f} ms against {before:.3f} ms"
    shutil.rmtree(build.staging)
    directory.rename(build.staging)
    return build.replace(segments, fused, built), moved, result, True
