"""Measurement-driven operator substitution (GDPNPU, thesis ch. 5, L1634-L1656).

GDPNPU does not search substitutions the way TASO does (a recompile per candidate is too
slow); it applies rules and picks their split factor ``s`` (a power of two) by
microbenchmark. Here every candidate node (see ``substitution_rules``) is cut out as a
standalone ONNX model, timed as it is and rewritten with each ``s``, on the compile's
target: onnxruntime on this CPU with the compile's threads (:class:`MeasuredBench`), or a
modeled unit's cost-model prediction (:class:`PredictedBench`). Every rewrite is checked
against the original on random inputs; one is kept only if it is exact within tolerance
and faster by ``MARGIN``. The thesis reports up to 4.30x on its NPU (a 5-wide depthwise
filter on a 1920x1080 RGB image at s = 16) and 2.5x for a per-channel reduce. On a
2-core AMD EPYC at 1 thread (``bench/energy_precision_bench.py``) the same blur measured
1.5x faster at s = 8, the split reduce 2.7x slower; the roofline cost model counts bytes
and flops only, so it predicts every rewrite slower (it moves more bytes) unless a unit's
efficiency factors say the original kernel is the slow one.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper

from engine.fusion.substitution_rules import RULES, Context, Rewrite, apply, rewrite_node

SPLIT_FACTORS = (2, 4, 8, 16)
MARGIN = 0.05  # a rewrite must be at least 5% faster to be kept
RUNS = 15
MAX_CANDIDATES = 16  # the largest nodes first: the microbenchmarks stay within seconds
RTOL, ATOL = 1e-4, 1e-4


class MeasuredBench:
    """Median wall time of ``RUNS`` onnxruntime runs on this CPU, after 2 warm-up runs.

    The models of one comparison run in alternating rounds (one run of each per round), so
    a burst of load from another process slows them alike instead of whichever ran then.
    Their sessions live together, so with more than one thread their pools do not spin
    between runs (spinning pools take cores from one another, ARCHITECTURE section 8)."""

    kind = "measured"

    def __init__(self, threads: int, runs: int = RUNS):
        from engine.targets.host import describe_host

        self.threads, self.runs = threads, runs
        cpu = describe_host()["cpu_model"]
        self.label = (
            f"measured on {cpu}, median of {runs} runs in alternating rounds, "
            f"{threads or 'all'} thread(s)"
        )

    def time_ms(self, models: list[onnx.ModelProto], feeds: dict) -> list[float | None]:
        runs = [_session(m, self.threads, spin=False).run for m in models]
        for run in runs:
            for _ in range(2):
                run(None, feeds)
        samples: list[list[float]] = [[] for _ in runs]
        for _ in range(self.runs):
            for run, times in zip(runs, samples, strict=True):
                t0 = time.perf_counter()
                run(None, feeds)
                times.append((time.perf_counter() - t0) * 1e3)
        return [statistics.median(times) for times in samples]


class PredictedBench:
    """The sum of the cost model's per-node latencies on one unit of a modeled target; by
    default its first non-CPU unit with a known fp32 peak (the rewrites are fp32 graphs)."""

    kind = "predicted"

    def __init__(self, profile, unit: str | None = None):
        from engine.targets.costmodel import MODEL_NAME, CostModel

        self.model = CostModel(profile)
        fp32 = [u for u in profile.units if u.peak_gflops.get("fp32")]
        offload = [u.name for u in fp32 if u.kind != "cpu"]
        self.unit = unit or (offload or [u.name for u in fp32] or [profile.units[0].name])[0]
        self.model.unit(self.unit)  # an unknown name raises here, not per candidate
        self.label = f"predicted by {MODEL_NAME} for unit {self.unit} of {profile.name}"
        self.unknown: list[str] = []  # per model of the last call: why its time is unknown

    def time_ms(self, models: list[onnx.ModelProto], feeds: dict) -> list[float | None]:
        self.unknown = []
        return [self._time_ms(m) for m in models]

    def _time_ms(self, model: onnx.ModelProto) -> float | None:
        from engine.graph.costs import cost_node
        from engine.graph.ir import build_graph
        from engine.targets.costmodel import op_dtype, op_variant

        graph = build_graph(onnx.shape_inference.infer_shapes(model))
        total = 0.0
        for node in graph.nodes:
            estimate = self.model.estimate(
                cost_node(node, graph),
                node.op_type,
                self.unit,
                op_dtype(node, graph),
                op_variant(node, graph),
            )
            if estimate.latency_us is None:
                self.unknown.append(f"{node.op_type}: {estimate.reason}")
                return None  # unknown is never zero
            total += estimate.latency_us
        self.unknown.append("")
        return total / 1e3


@dataclass
class Candidate:
    """One node's trials: the original's time, each ``s``'s time and error, the decision."""

    node: str
    op_type: str
    rule: str
    input_shape: list[int]
    original_ms: float | None
    tried: list[dict] = field(default_factory=list)
    chosen_s: int | None = None
    reason: str = ""

    def to_dict(self) -> dict:
        return {
            "node": self.node,
            "op_type": self.op_type,
            "rule": self.rule,
            "input_shape": self.input_shape,
            "original_ms": self.original_ms,
            "tried": list(self.tried),
            "chosen_s": self.chosen_s,
            "decision": f"s={self.chosen_s}" if self.chosen_s else "kept original",
            "reason": self.reason,
        }


@dataclass
class Substitution:
    """What :func:`substitute` tried and kept (``to_dict`` is the compile result's section)."""

    timing: str
    candidates: list[Candidate]
    origin: dict[str, str] = field(default_factory=dict)  # new node -> the node it replaced

    def to_dict(self) -> dict:
        kept = [c for c in self.candidates if c.chosen_s]
        before = sum(c.original_ms for c in kept)
        after = sum(_time_of(c, c.chosen_s) for c in kept)
        return {
            "enabled": True,
            "timing": self.timing,
            "rules": list(RULES),
            "split_factors": list(SPLIT_FACTORS),
            "margin": MARGIN,
            "candidates": [c.to_dict() for c in self.candidates],
            "kept": len(kept),
            "before_ms": before if kept else None,
            "after_ms": after if kept else None,
        }


def substitute(model: onnx.ModelProto, bench, seed: int = 0, progress=None):
    """``(model with the kept rewrites, Substitution)``; ``model`` must be shape-inferred."""
    report = progress or (lambda fraction, message: None)
    ctx = Context(model)
    found = _candidates(model, ctx)
    results, kept = [], []
    for i, (node, rule) in enumerate(found):
        report(i / max(len(found), 1), f"substitution: timing {node.name} ({rule})")
        candidate, rewrite = _try(node, rule, model, ctx, bench, seed)
        results.append(candidate)
        if rewrite is not None:
            kept.append(rewrite)
    if kept:
        model = onnx.shape_inference.infer_shapes(apply(model, kept))
    origin = {new.name: r.node for r in kept for new in r.nodes}
    return model, Substitution(bench.label, results, origin)


def _candidates(model: onnx.ModelProto, ctx: Context) -> list[tuple[onnx.NodeProto, str]]:
    found = []
    for node in model.graph.node:
        for rule in RULES:
            if any(rewrite_node(rule, node, ctx, s) for s in SPLIT_FACTORS):
                found.append((node, rule))
    size = lambda item: int(np.prod(ctx.shapes.get(item[0].input[0], (0,))))  # noqa: E731
    return sorted(found, key=size, reverse=True)[:MAX_CANDIDATES]


def _try(node, rule, model, ctx, bench, seed) -> tuple[Candidate, Rewrite | None]:
    original = standalone(model, node, ctx)
    feeds = _random_feeds(original, seed)
    reference = _session(original, 1).run(None, feeds)
    shape = list(ctx.shapes.get(node.input[0], ()))
    candidate = Candidate(node.name, node.op_type, rule, shape, None)
    rewrites, models = [], [original]
    for s in SPLIT_FACTORS:
        rewrite = rewrite_node(rule, node, ctx, s)
        if rewrite is None:
            continue
        rewritten = apply(original, [rewrite])
        got = _session(rewritten, 1).run(None, feeds)
        pairs = list(zip(reference, got, strict=True))
        exact = all(np.allclose(a, b, rtol=RTOL, atol=ATOL) for a, b in pairs)
        error = max(float(np.max(np.abs(a - b), initial=0.0)) for a, b in pairs)
        candidate.tried.append({"s": s, "ms": None, "max_abs_error": error, "exact": exact})
        if exact:
            rewrites.append((candidate.tried[-1], rewrite))
            models.append(rewritten)
        else:
            candidate.tried[-1]["why"] = "not exact: not timed"
    times = bench.time_ms(models, feeds)
    unknown = getattr(bench, "unknown", None) or [""] * len(models)
    candidate.original_ms = times[0]
    best: tuple[float, Rewrite] | None = None
    for (tried, rewrite), ms, why in zip(rewrites, times[1:], unknown[1:], strict=True):
        tried["ms"] = ms
        if ms is None:
            tried["why"] = why
        elif best is None or ms < best[0]:
            best = (ms, rewrite)
    candidate.reason = _decide(candidate, best, unknown[0])
    if candidate.reason.startswith("faster"):
        candidate.chosen_s = best[1].s
        return candidate, best[1]
    return candidate, None


def _decide(candidate: Candidate, best, unknown: str) -> str:
    if candidate.original_ms is None:
        return f"the original's time is unknown ({unknown or 'not timed'})"
    if best is None:
        return "no rewrite was exact and timed"
    ms, rewrite = best
    speedup = candidate.original_ms / ms if ms else float("inf")
    if ms <= candidate.original_ms * (1 - MARGIN):
        return f"faster: {speedup:.2f}x at s={rewrite.s}"
    return f"the best rewrite (s={rewrite.s}, {speedup:.2f}x) is not {MARGIN:.0%} faster"


def _time_of(candidate: Candidate, s: int) -> float:
    return next(t["ms"] for t in candidate.tried if t["s"] == s)


def standalone(model: onnx.ModelProto, node: onnx.NodeProto, ctx: Context) -> onnx.ModelProto:
    """``node`` alone as a model: its non-constant inputs are graph inputs."""
    types = _elem_types(model)
    inputs = [
        helper.make_tensor_value_info(name, types[name], ctx.shapes[name])
        for name in dict.fromkeys(node.input)
        if name and name not in ctx.constants
    ]
    outputs = [
        helper.make_tensor_value_info(name, types.get(name, 0), ctx.shapes.get(name))
        for name in node.output
    ]
    used = set(node.input)
    graph = helper.make_graph(
        [node],
        f"{node.name}-alone",
        inputs,
        outputs,
        [t for t in model.graph.initializer if t.name in used],
    )
    out = helper.make_model(graph, opset_imports=list(model.opset_import))
    out.ir_version = min(model.ir_version or 10, 10)
    return out


def _elem_types(model: onnx.ModelProto) -> dict[str, int]:
    g = model.graph
    types = {v.name: v.type.tensor_type.elem_type for v in [*g.input, *g.value_info, *g.output]}
    types.update({t.name: t.data_type for t in g.initializer})
    return types


def _random_feeds(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in model.graph.input:
        t = value.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
        feeds[value.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _session(model: onnx.ModelProto, threads: int, spin: bool = True):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = threads
    if not spin:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
