"""Reading onnxruntime's profiler trace (Chrome trace JSON) into per-run kernel times.

The trace holds one ``model_run`` event per inference (category ``Session``) and one
``<node>_kernel_time`` event per executed kernel (category ``Node``) with ``args.op_name``.
Kernel events are assigned to the run whose time window contains them.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.profiling.session import harrell_davis_median

KERNEL_SUFFIX = "_kernel_time"


@dataclass
class KernelSamples:
    """One executed kernel: its onnxruntime op type and its time (us) in each run it ran in
    (``runs`` holds those runs' indices, ``sessions`` the session each ran in; empty: all
    in one)."""

    name: str
    op_type: str
    samples_us: list[float] = field(default_factory=list)
    runs: list[int] = field(default_factory=list)
    sessions: list[int] = field(default_factory=list)

    def median_us(self) -> float:
        """The median time per session (Harrell-Davis, see
        :func:`engine.profiling.session.harrell_davis_median`), averaged over the sessions:
        within a session the median ignores runs another process slowed down; across
        sessions the mean averages
        the memory placements (see :mod:`engine.profiling.nodes`) instead of letting the
        median jump to whichever placement most sessions happened to get."""
        per_session: dict[int, list[float]] = {}
        for t, s in zip(self.samples_us, self.sessions or [0] * len(self.samples_us),
                        strict=True):  # fmt: skip
            per_session.setdefault(s, []).append(t)
        return float(np.mean([harrell_davis_median(v) for v in per_session.values()]))

    def mean_over(self, runs: set[int]) -> float:
        """Mean time per run over ``runs`` (0 in a run it did not run in)."""
        total = sum(t for t, r in zip(self.samples_us, self.runs, strict=True) if r in runs)
        return total / len(runs) if runs else 0.0


@dataclass
class Trace:
    """Durations of the kept runs and, in execution order, the kernels they ran."""

    runs_us: list[float]
    kernels: list[KernelSamples]

    def subset(self, runs: range) -> Trace:
        """The runs in ``runs`` only, renumbered from 0."""
        kernels = []
        for k in self.kernels:
            sessions = k.sessions or [0] * len(k.runs)
            kept = [(t, r - runs.start, s)
                    for t, r, s in zip(k.samples_us, k.runs, sessions, strict=True)
                    if r in runs]  # fmt: skip
            if kept:
                times, indices, owners = (list(column) for column in zip(*kept, strict=True))
                kernels.append(KernelSamples(k.name, k.op_type, times, indices, owners))
        return Trace([self.runs_us[i] for i in runs], kernels)


def parse_trace(events: list[dict], skip_runs: int = 0) -> Trace:
    """Per-run kernel durations from a trace, leaving out the first ``skip_runs`` runs."""
    runs = sorted(
        (e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
        key=lambda e: e["ts"],
    )[skip_runs:]
    starts = [r["ts"] for r in runs]
    per_run: list[dict[str, float]] = [{} for _ in runs]
    kernels: dict[str, KernelSamples] = {}
    for event in sorted(_kernel_events(events), key=lambda e: e["ts"]):
        index = bisect.bisect_right(starts, event["ts"]) - 1
        if index < 0 or event["ts"] > runs[index]["ts"] + runs[index]["dur"]:
            continue  # a warm-up run, or outside every run
        name = event["name"][: -len(KERNEL_SUFFIX)]
        if name not in kernels:
            kernels[name] = KernelSamples(name, event.get("args", {}).get("op_name", "?"))
        per_run[index][name] = per_run[index].get(name, 0.0) + float(event["dur"])
    for index, times in enumerate(per_run):
        for name, duration in times.items():
            kernels[name].samples_us.append(duration)
            kernels[name].runs.append(index)
    return Trace([float(r["dur"]) for r in runs], list(kernels.values()))


def interleave(traces: list[Trace], order: Sequence[int] | None = None) -> Trace:
    """One trace of several sessions' traces whose runs went by turns. ``order[i]`` is the
    session that made run ``i`` (by default one run each in turn: run ``j`` of session ``k``
    of ``n`` becomes run ``j * n + k``). Kernels keep the first session's order."""
    n = len(traces)
    if order is None:
        longest = max((len(t.runs_us) for t in traces), default=0)
        order = [k for j in range(longest) for k in range(n) if j < len(traces[k].runs_us)]
    positions: list[list[int]] = [[] for _ in range(n)]
    for i, k in enumerate(order):
        positions[k].append(i)
    runs_us = [0.0] * len(order)
    kernels: dict[str, KernelSamples] = {}
    for k, trace in enumerate(traces):
        where = positions[k]
        if len(where) != len(trace.runs_us):
            raise ValueError(
                f"session {k} made {len(where)} runs by the order, its trace has "
                f"{len(trace.runs_us)}"
            )
        for j, duration in enumerate(trace.runs_us):
            runs_us[where[j]] = duration
        for kernel in trace.kernels:
            merged = kernels.setdefault(kernel.name, KernelSamples(kernel.name, kernel.op_type))
            merged.samples_us.extend(kernel.samples_us)
            merged.runs.extend(where[r] for r in kernel.runs)
            merged.sessions.extend([k] * len(kernel.runs))
    return Trace(runs_us, list(kernels.values()))


def central_runs(runs_us: list[float]) -> set[int]:
    """The runs whose duration lies between the quartiles: typical runs, without the ones
    another process slowed down (per-kernel medians cannot tell which runs those were)."""
    if not runs_us:
        return set()
    low, high = np.percentile(runs_us, [25, 75])
    return {i for i, t in enumerate(runs_us) if low <= t <= high}


def _kernel_events(events: list[dict]):
    for event in events:
        if event.get("cat") == "Node" and str(event.get("name", "")).endswith(KERNEL_SUFFIX):
            yield event
