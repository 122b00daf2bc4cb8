"""The onnx package's node test cases as an external test suite for a candidate.

Each case is a one-operator model with inputs and expected outputs written by the ONNX
authors (``onnx/backend/test/data/node/<case>/model.onnx`` and
``test_data_set_0/{input,output}_<j>.pb``). A candidate runs every case and its outputs
are compared with the expected ones using our metrics, so the run checks both the
candidate (operator coverage and correctness) and, with onnxruntime as the candidate,
our comparison itself.

Every case goes through the stages ``import`` (the candidate accepts the model),
``compile`` (it builds it), ``run`` and ``compare``; a result's ``stage`` is where it
stopped. Outcomes: ``pass``; ``fail`` (wrong values or dtype, a build that raises, an
error while running a model it loaded, or, run isolated, a crash or a timeout);
``skip`` with the reason: the candidate cannot import the model (an operator, type,
opset or IR version it does not support), compiled none of it (a compiler that hands
every node to another runtime, like TVM's fallback to onnxruntime), or says while
running that it does not support the usage; the case has sequence / optional / map
values (not compared), its outputs are random draws, or the case is a known deviation
of that candidate from the spec (``KNOWN_DEVIATIONS``, each with its source).

With an :class:`Isolation` the cases run in worker processes (``spawn``), so a compiler
that segfaults, aborts or hangs on one case costs that case only: it is a failure with
the signal or the time limit as the reason, the worker is replaced and the run goes on.

Some onnx wheels leave the data out; the cases are then generated in memory from the
same definitions (``onnx.backend.test.case.node``, which
``onnx.backend.test.cmd_tools generate-data`` writes to those files).
"""

from __future__ import annotations

import contextlib
import faulthandler
import multiprocessing
import os
import pickle
import re
import signal
import sys
import tempfile
import time
import warnings
from collections import Counter, deque
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from multiprocessing.connection import wait
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from engine.accuracy.candidates import Candidate, available_candidates, make_candidate
from engine.accuracy.errors import CandidateError
from engine.accuracy.metrics import Thresholds, compare_tensors, judge
from engine.errors import ProgressFn, error_line

NODE_DATA_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"
RANDOM_OPS = frozenset(
    {
        "Bernoulli",
        "Multinomial",
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
    }
)
UNSUPPORTED_MARKERS = ("NOT_IMPLEMENTED", "not supported", "is not defined for")
"""Words with which a runtime says, while running, that it does not support a usage."""

KNOWN_DEVIATIONS = {
    "ort": {
        "test_maxunpool_export_with_output_shape": "listed in onnxruntime's backend-test "
        "filters (result mismatch)",
        "test_resize_downsample_scales_cubic_align_corners": "listed in onnxruntime's "
        "backend-test filters (results mismatch with onnx tests)",
        "test_resize_downsample_scales_linear_align_corners": "listed in onnxruntime's "
        "backend-test filters (results mismatch with onnx tests)",
        "test_attention_4d_with_past_and_present_qk_matmul_bias_3d_mask_causal": "masked "
        "scores in qk_matmul_output are float32's lowest value where the spec writes -inf",
        "test_attention_4d_with_past_and_present_qk_matmul_bias_4d_mask_causal": "masked "
        "scores in qk_matmul_output are float32's lowest value where the spec writes -inf",
        "test_attention_4d_diff_heads_mask4d_padded_kv": "onnxruntime rejects the mask and "
        "past lengths the spec allows (inconsistent total_sequence_length)",
    }
}
"""Cases where a candidate is known to disagree with the ONNX spec: a failure there is a
skip with this reason (the runtime does not support that usage); a pass stays a pass."""

STAGES = ("import", "compile", "run", "compare")
"""Where a case can stop, in order; ``""`` for a case skipped before the candidate saw it."""


@dataclass(frozen=True)
class NodeCase:
    """One test case: a model, its inputs (by graph input) and the expected outputs."""

    name: str
    model: onnx.ModelProto
    inputs: list
    outputs: list

    @property
    def op_type(self) -> str:
        return self.model.graph.node[0].op_type if self.model.graph.node else ""


@dataclass(frozen=True)
class CaseResult:
    """One case's outcome: ``status`` pass / fail / skip, the ``stage`` it stopped at, the
    reason, the worst output's SNR and absolute error, and a ``note`` (e.g. nodes the
    candidate delegated while the rest passed)."""

    name: str
    op_type: str
    status: str
    stage: str
    reason: str = ""
    snr_db: float | None = None
    max_abs: float | None = None
    note: str = ""
    seconds: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Isolation:
    """Run each case in a worker process (``spawn``), ``timeout_s`` at most per case.

    A case whose worker dies (signal, exit) or runs out of time fails with that reason,
    the stage it had reached and the worker's last line of output; the worker is
    replaced. A candidate given as a factory must be picklable (a module-level function).
    """

    timeout_s: float = 120.0
    workers: int = 1


def suite_options(candidate: str, timeout_s: float | None) -> dict:
    """Candidate options for a suite run: one thread (a case is tiny; workers run side by
    side) and, for a compiler with a build time limit of its own, half the case's limit,
    so that a hanging build is reported as the compiler's (its segment falls back)
    rather than as the case timing out."""
    options: dict = {"threads": 1}
    if candidate == "tvm" and timeout_s is not None:
        options["build_timeout_s"] = timeout_s / 2
    return options


@dataclass
class NodeSuiteReport:
    """Per-case outcomes of one candidate, with counts a user can read as a table."""

    candidate: str
    source: str
    thresholds: Thresholds
    results: list[CaseResult] = field(default_factory=list)
    seconds: float | None = None

    def counts(self) -> dict[str, int]:
        """``cases``; ``imported`` (the candidate accepted the model), ``compiled`` (it
        built it), ``ran`` (it ran to the comparison); and how many ``passed``, ``failed``
        and were ``skipped``."""
        by_status = Counter(r.status for r in self.results)
        reached = Counter(r.stage for r in self.results)
        return {
            "cases": len(self.results),
            "imported": sum(reached[s] for s in STAGES[1:]),
            "compiled": sum(reached[s] for s in STAGES[2:]),
            "ran": reached["compare"],
            "passed": by_status["pass"],
            "failed": by_status["fail"],
            "skipped": by_status["skip"],
        }

    def to_dict(self) -> dict:
        return {
            "candidate": self.candidate,
            "source": self.source,
            "seconds": self.seconds,
            "thresholds": self.thresholds.to_dict(),
            "counts": self.counts(),
            "skip_reasons": self.reason_counts("skip"),
            "fail_reasons": self.reason_counts("fail"),
            "failures": [r.to_dict() for r in self.results if r.status == "fail"],
            "cases": [r.to_dict() for r in self.results],
        }

    def reason_counts(self, status: str) -> dict[str, int]:
        """How many cases of ``status`` share each reason (without case-specific detail)."""
        kinds = (_reason_kind(r.reason, self.candidate) for r in self.results if r.status == status)
        return dict(Counter(kinds).most_common())

    def table(self, *, status: Collection[str] = ("fail", "skip")) -> str:
        """Plain-text table: the counts, then one line per case of the given statuses."""
        counts = self.counts()
        lines = [
            f"candidate {self.candidate} on {counts['cases']} onnx node cases ({self.source})",
            "  ".join(f"{k} {v}" for k, v in counts.items()),
            "",
            f"{'case':<48} {'op':<22} {'status':<6} {'stage':<8} reason",
        ]
        lines += [
            f"{r.name:<48} {r.op_type:<22} {r.status:<6} {r.stage:<8} {r.reason}"
            for r in self.results
            if r.status in status
        ]
        return "\n".join(lines)

    def markdown(self) -> str:
        """Operator coverage as Markdown: the counts, the reasons grouped, one row per
        operator (cases, pass, fail, skip and why), then every failing case."""
        counts = self.counts()
        lines = [
            f"# onnx node tests with candidate `{self.candidate}`",
            "",
            f"{counts['cases']} cases from `{self.source}`"
            + (f", {self.seconds:.0f} s" if self.seconds is not None else "")
            + ". A case stops at the first stage it does not get through: import (the "
            "candidate accepts the model), compile, run, compare (with the expected outputs, "
            f"max_rel {self.thresholds.max_rel}, SNR {self.thresholds.snr_db} dB).",
            "",
            "| " + " | ".join(counts) + " |",
            "|" + "---:|" * len(counts),
            "| " + " | ".join(str(v) for v in counts.values()) + " |",
        ]
        for status, title in (("fail", "Failures"), ("skip", "Skips")):
            reasons = self.reason_counts(status)
            if reasons:
                lines += ["", f"## {title} by reason", "", "| cases | reason |", "|---:|---|"]
                lines += [f"| {n} | {_cell(reason)} |" for reason, n in reasons.items()]
        lines += [
            "",
            "## Operators",
            "",
            "`(expanded)`: the operator's function body, as separate nodes.",
            "",
            "| operator | cases | pass | fail | skip | why not passed |",
            "|---|---:|---:|---:|---:|---|",
        ]
        by_op: dict[str, list[CaseResult]] = {}
        for r in self.results:
            by_op.setdefault(r.op_type, []).append(r)
        for op, results in sorted(by_op.items(), key=lambda item: item[0].lower()):
            statuses = Counter(r.status for r in results)
            why = Counter(
                f"{r.status}: {_reason_kind(r.reason, self.candidate)}"
                for r in results
                if r.status != "pass"
            )
            text = "; ".join(f"{k} ({n})" if n > 1 else k for k, n in why.most_common())
            lines.append(
                f"| {op} | {len(results)} | {statuses['pass']} | {statuses['fail']} | "
                f"{statuses['skip']} | {_cell(text)} |"
            )
        failed = [r for r in self.results if r.status == "fail"]
        if failed:
            lines += [
                "",
                "## Failing cases",
                "",
                "Reasons cut at 240 characters; the JSON report has them whole.",
                "",
                "| case | stage | reason |",
                "|---|---|---|",
            ]
            lines += [f"| {r.name} | {r.stage} | {_cell(r.reason[:240])} |" for r in failed]
        return "\n".join(lines) + "\n"


def node_cases(
    root: str | Path | None = None, *, names: Collection[str] | None = None
) -> Iterator[NodeCase]:
    """The node test cases, sorted by name: from ``root`` (default: the installed onnx's
    data directory), or generated from onnx's case definitions when it has no data."""
    root = Path(root) if root is not None else NODE_DATA_DIR
    wanted = set(names) if names is not None else None
    if root.is_dir():
        for case_dir in sorted(p for p in root.iterdir() if (p / "model.onnx").is_file()):
            if wanted is None or case_dir.name in wanted:
                yield _read_case(case_dir)
        return
    for case in _generated_cases():
        if wanted is None or case.name in wanted:
            yield case


def run_node_suite(
    candidate: str | Callable[[onnx.ModelProto], Candidate] = "ort",
    cases: Collection[NodeCase] | None = None,
    *,
    thresholds: Thresholds | None = None,
    options: Mapping | None = None,
    isolation: Isolation | None = None,
    progress: ProgressFn | None = None,
) -> NodeSuiteReport:
    """Run ``candidate`` (a name for ``make_candidate`` or a factory) on every case.

    ``options`` go to ``make_candidate`` (e.g. ``{"threads": 1}``). With ``isolation``
    the cases run in worker processes (see :class:`Isolation`), else in this process.
    ``thresholds`` default to :meth:`Thresholds.strict` (the node tests' own rtol 1e-3):
    a single operator in fp32 has no reason to be further off.
    """
    if isinstance(candidate, str) and candidate not in available_candidates():
        raise CandidateError(
            f"unknown candidate '{candidate}'",
            hint=f"Use one of {', '.join(available_candidates())}.",
        )
    label = candidate if isinstance(candidate, str) else getattr(candidate, "__name__", "custom")
    known = KNOWN_DEVIATIONS.get(label, {})
    cases = list(cases) if cases is not None else list(node_cases())
    source = str(NODE_DATA_DIR) if NODE_DATA_DIR.is_dir() else "onnx.backend.test.case.node"
    report = NodeSuiteReport(label, source, thresholds or Thresholds.strict())
    started = time.perf_counter()
    finished = 0

    def done(result: CaseResult) -> None:
        nonlocal finished
        if progress and finished % 50 == 0:
            progress(finished / max(len(cases), 1), f"node case {finished + 1}/{len(cases)}")
        finished += 1

    if isolation is None:
        factory = _factory(candidate, options or {})
        results = []
        for case in cases:
            results.append(_timed(run_case, factory, case, report.thresholds))
            done(results[-1])
    else:
        results = _run_isolated(candidate, options or {}, cases, report.thresholds, isolation, done)
    operators = _operators(cases)
    for result in results:
        result = replace(result, op_type=operators[result.name])
        if result.status == "fail" and result.name in known:
            reason = f"known deviation: {known[result.name]}"
            result = replace(result, status="skip", reason=reason)
        report.results.append(result)
    report.seconds = round(time.perf_counter() - started, 1)
    return report


def run_case(
    factory,
    case: NodeCase,
    thresholds: Thresholds,
    on_stage: Callable[[str], None] | None = None,
) -> CaseResult:
    """Import, compile, run and compare one case; each output is judged by ``thresholds``
    loosened to the precision of its type (:meth:`Thresholds.for_precision`).

    ``on_stage(stage)`` is called as each stage begins (a worker reports it, so that a
    crash can say where it happened).
    """
    result = _precheck(case)
    if result is not None:
        return result
    enter = on_stage or (lambda stage: None)
    feeds = dict(zip((v.name for v in case.model.graph.input), case.inputs, strict=False))
    enter("compile")
    try:
        candidate = factory(case.model)
        prepare = getattr(candidate, "prepare", None)
        if prepare is not None:  # a compiler that specializes to the input shapes
            prepare(feeds)
    except CandidateError as e:
        return _refused(case, e)
    except Exception as e:  # noqa: BLE001 - a candidate's compiler may raise anything
        return _result(case, "fail", "compile", f"compile failed: {_describe(e)}")
    info = candidate.describe()
    if info.get("compiled_nodes", 1) == 0:
        return _not_compiled(case, info.get("fallback") or [])
    enter("run")
    try:
        values = candidate.run(feeds)
    except CandidateError as e:
        return _refused(case, e)
    except Exception as e:  # noqa: BLE001 - a candidate's runtime may raise anything
        return _result(case, "fail", "run", _describe(e))
    enter("compare")
    reasons, worst_snr, worst_abs = [], None, None
    for value_info, expected in zip(case.model.graph.output, case.outputs, strict=True):
        got = values.get(value_info.name)
        if not isinstance(got, np.ndarray):
            reasons.append(f"'{value_info.name}': no tensor returned")
            continue
        if got.dtype != expected.dtype:
            reasons.append(f"'{value_info.name}': dtype {got.dtype}, expected {expected.dtype}")
        limits = thresholds.for_precision(expected.dtype)
        metrics = compare_tensors(expected, got, rel_floor=limits.rel_floor)
        reasons += [f"'{value_info.name}': {r}" for r in judge(metrics, limits)]
        if metrics.error is None:
            worst_snr = metrics.snr_db if worst_snr is None else min(worst_snr, metrics.snr_db)
            worst_abs = metrics.max_abs if worst_abs is None else max(worst_abs, metrics.max_abs)
    status = "fail" if reasons else "pass"
    note = _fallback_note(info.get("fallback") or [])
    return _result(case, status, "compare", "; ".join(reasons), worst_snr, worst_abs, note)


def _refused(case: NodeCase, error: CandidateError) -> CaseResult:
    """A typed refusal: unsupported model or usage (skip) or a broken build or run (fail).

    A candidate that cannot be set up at all (not installed) is no case's outcome: raised.
    """
    if error.stage == "setup":
        raise error
    if error.stage == "compile":
        return _result(case, "fail", "compile", error.message)
    if error.stage != "run":
        return _result(case, "skip", "import", f"cannot import: {error.message}")
    if any(marker in error.message for marker in UNSUPPORTED_MARKERS):
        return _result(case, "skip", "run", f"unsupported at run time: {error.message}")
    return _result(case, "fail", "run", error.message)


def _not_compiled(case: NodeCase, fallback: list[dict]) -> CaseResult:
    """A skip for a candidate that compiled no node itself (``describe()`` says
    ``compiled_nodes: 0``) but handed each to another runtime, with the reason."""
    reason = fallback[0]["reason"] if fallback else "no node left to compile"
    stage = "compile" if "compile" in reason else "import"
    return _result(case, "skip", stage, f"not compiled, fell back: {reason}")


def _fallback_note(fallback: list[dict]) -> str:
    if not fallback:
        return ""
    ops = sorted({f.get("op_type", "?") for f in fallback})
    return f"{len(fallback)} nodes fell back ({', '.join(ops)}): {fallback[0]['reason']}"


def _factory(candidate, options: Mapping) -> Callable[[onnx.ModelProto], Candidate]:
    if callable(candidate):
        return candidate
    return lambda model: make_candidate(candidate, model, **options)


def _timed(run, *args) -> CaseResult:
    started = time.perf_counter()
    result = run(*args)
    return replace(result, seconds=round(time.perf_counter() - started, 3))


def _run_isolated(candidate, options, cases, thresholds, isolation, done) -> list[CaseResult]:
    """The cases on ``isolation.workers`` worker processes, in the cases' order."""
    context = multiprocessing.get_context("spawn")
    results: dict[int, CaseResult] = {}
    todo = deque()
    for index, case in enumerate(cases):
        skipped = _precheck(case)  # no need for a worker, nor to send values it cannot take
        if skipped is None:
            todo.append((index, case))
        else:
            results[index] = skipped
            done(skipped)
    workers: list[_Worker | None] = [None] * max(1, isolation.workers)
    with tempfile.TemporaryDirectory(prefix="node-suite-") as logs:
        try:
            while todo or any(w is not None and w.job for w in workers):
                for k, worker in enumerate(workers):
                    if todo and (worker is None or not worker.job):
                        if worker is None:
                            log = Path(logs) / f"worker{k}.log"
                            workers[k] = worker = _Worker(
                                context, (candidate, options, thresholds), log
                            )
                        worker.submit(*todo.popleft(), isolation.timeout_s)
                busy = [w for w in workers if w is not None and w.job]
                deadline = min(w.deadline for w in busy)
                wait(
                    [x for w in busy for x in (w.conn, w.process.sentinel)],
                    max(0.0, deadline - time.monotonic()),
                )
                for k, worker in enumerate(workers):
                    found = worker.collect() if worker is not None and worker.job else None
                    if found is not None:
                        results[found[0]] = found[1]
                        done(found[1])
                    # A worker that died after collect() looked keeps its job: the next
                    # round's collect() reports the crash instead of losing the case.
                    if worker is not None and not worker.job and not worker.process.is_alive():
                        worker.close()
                        workers[k] = None
        finally:
            for worker in workers:
                if worker is not None:
                    worker.close()
    return [results[i] for i in range(len(cases))]


class _Worker:
    """One worker process and the case it is on (``job``: index and case)."""

    def __init__(self, context, setup: tuple, log: Path):
        self.conn, child = context.Pipe()
        self.log = log
        self.process = context.Process(
            target=_serve, args=(child, *setup, str(log)), daemon=True, name="node-suite-worker"
        )
        try:
            self.process.start()
        except (pickle.PicklingError, AttributeError, TypeError) as e:
            raise CandidateError(
                f"the candidate cannot be sent to a worker process: {e}",
                hint="Give a candidate name, or a factory defined at module level.",
            ) from e
        finally:
            child.close()
        self.job: tuple[int, NodeCase] | None = None
        self.stage, self.started, self.deadline, self.timeout_s = "", 0.0, 0.0, 0.0
        try:
            if self.conn.poll(_STARTUP_S) and self.conn.recv() == ("ready", None):
                return
        except (EOFError, OSError):
            self.process.join(5)
        self.close()
        last = _last_line(log)
        raise CandidateError(
            f"the node-suite worker did not start ({_exit_reason(self.process.exitcode)})"
            + (f": {last}" if last else ""),
            hint="A script that runs the suite isolated needs an "
            "`if __name__ == '__main__':` guard (the worker imports it again).",
        )

    def submit(self, index: int, case: NodeCase, timeout_s: float) -> None:
        self.job, self.stage = (index, case), "compile"
        self.started = time.monotonic()
        self.deadline, self.timeout_s = self.started + timeout_s, timeout_s
        self.conn.send(case)

    def collect(self) -> tuple[int, CaseResult] | None:
        """The finished job's result, a failure if the worker died or ran out of time,
        else ``None`` (still working)."""
        index, case = self.job
        try:
            while self.conn.poll():
                kind, value = self.conn.recv()
                if kind == "stage":
                    self.stage = value
                    continue
                if kind == "setup":
                    raise CandidateError(*value)
                self.job = None
                return index, replace(value, seconds=self._seconds())
        except (EOFError, OSError):
            self.process.join(5)  # the pipe closed: the worker is exiting
        if not self.process.is_alive():
            reason = f"crashed: {_exit_reason(self.process.exitcode)} during {self.stage}"
        elif time.monotonic() >= self.deadline:
            with contextlib.suppress(ProcessLookupError):  # it writes where it is stuck
                os.kill(self.process.pid, _STACK_SIGNAL)
            self.process.join(_STACK_WAIT_S)
            self.process.kill()
            self.process.join()
            reason = f"timed out after {self.timeout_s:g} s during {self.stage}"
            where = _stuck_at(self.log)
            reason += f" at {where}" if where else ""
        else:
            return None
        last = _last_line(self.log)
        reason += f" (last output: {last})" if last else ""
        self.job = None
        result = _result(case, "fail", self.stage, reason)
        return index, replace(result, seconds=self._seconds())

    def close(self) -> None:
        if self.process.is_alive():
            with contextlib.suppress(OSError):
                self.conn.send(None)
            self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()

    def _seconds(self) -> float:
        return round(time.monotonic() - self.started, 3)


def _serve(conn, candidate, options, thresholds, log: str) -> None:
    """A worker's loop: receive a case, send its stages and its result, until ``None``."""
    # Native code writes straight to the descriptors: keep it out of the parent's output,
    # and keep the last line of it to explain a crash.
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    faulthandler.register(_STACK_SIGNAL, file=sys.stderr, all_threads=False)
    factory = _factory(candidate, options)
    conn.send(("ready", None))
    while True:
        try:
            case = conn.recv()
        except EOFError:
            return
        if case is None:
            return
        os.ftruncate(out, 0)
        stage = ["compile"]

        def enter(name: str, stage=stage) -> None:
            stage[0] = name
            conn.send(("stage", name))

        try:
            result = run_case(factory, case, thresholds, enter)
        except CandidateError as e:  # the candidate cannot be set up: no case will run
            conn.send(("setup", (e.message,)))
            return
        except Exception as e:  # noqa: BLE001 - one case's bug must not end the run
            result = _result(case, "fail", stage[0], f"internal error: {_describe(e)}")
        conn.send(("result", result))


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _last_line(path: Path) -> str:
    """The worker's last line of output that is not a Python stack dump."""
    lines = [line.strip() for line in _output(path).split(_STACK_HEADER)[0].splitlines()]
    lines = [line for line in lines if line]
    return lines[-1][:200] if lines else ""


def _stuck_at(path: Path) -> str:
    """Where the stack the worker dumped stands: the innermost frame, and the innermost
    one in the engine when that is another."""
    _, found, stack = _output(path).rpartition(_STACK_HEADER)
    frames = _FRAME.findall(stack) if found else []
    if not frames:
        return ""
    shown = [frames[0]] + [f for f in frames[1:] if f[0].startswith(f"{_ROOT}/engine/")][:1]
    return ", from ".join(f"{_short(file)}:{line} {func}" for file, line, func in shown)


def _output(path: Path) -> str:
    try:
        return path.read_bytes()[-20000:].decode("utf-8", "replace")
    except OSError:
        return ""


def _short(file: str) -> str:
    """A source path from its package or this project down: ``tvm/...``, ``engine/...``."""
    _, found, tail = file.partition("/site-packages/")
    if found:
        return tail
    _, found, tail = file.partition("/lib/python3")
    if found:
        return tail.split("/", 1)[-1]
    _, found, tail = file.partition(f"{_ROOT}/")
    return tail if found else file


def _describe(error: Exception) -> str:
    return f"{type(error).__name__}: {error_line(error)}"[:400]


def _operators(cases: Collection[NodeCase]) -> dict[str, str]:
    """Each case's operator; an ``_expanded`` case (the operator's function body as
    nodes) is its base case's operator marked ``(expanded)``."""
    ops = {case.name: case.op_type for case in cases}
    found = {}
    for name, op in ops.items():
        base = _EXPANDED.match(name)
        if base is not None:
            op = f"{ops.get(base.group(1), op)} (expanded)"
        found[name] = op
    return found


_EXPANDED = re.compile(r"^(.*)_expanded(_ver\d+)?$")
_STARTUP_S = 120.0  # importing the candidate's packages in a fresh process
_ROOT = str(Path(__file__).resolve().parents[2])
_STACK_SIGNAL = signal.SIGUSR1
_STACK_WAIT_S = 2.0
_STACK_HEADER = "Stack (most recent call first):"
_FRAME = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')


def _cell(text: str) -> str:
    """``text`` fit for a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _precheck(case: NodeCase) -> CaseResult | None:
    graph = case.model.graph
    for kind, values in (("input", graph.input), ("output", graph.output)):
        for value in values:
            which = value.type.WhichOneof("value")
            if which != "tensor_type":
                what = (which or "untyped").replace("_type", "")
                return _result(case, "skip", "", f"{what} {kind} '{value.name}' is not compared")
    randoms = RANDOM_OPS & {n.op_type for n in graph.node}
    if randoms:
        return _result(case, "skip", "", f"random outputs ({', '.join(sorted(randoms))})")
    if _training_dropout(case):
        return _result(case, "skip", "", "random outputs (Dropout in training mode)")
    if len(case.outputs) != len(graph.output):
        return _result(case, "skip", "", "the case has no expected value for every output")
    return None


def _training_dropout(case: NodeCase) -> bool:
    """A Dropout that draws its mask: training_mode fed as true and a ratio above 0."""
    fed = dict(zip((v.name for v in case.model.graph.input), case.inputs, strict=False))
    for node in case.model.graph.node:
        if node.op_type != "Dropout" or len(node.input) < 3 or not node.input[2]:
            continue
        training = fed.get(node.input[2])
        ratio = fed.get(node.input[1]) if node.input[1] else 0.5
        if training is not None and bool(np.asarray(training)) and np.asarray(ratio) != 0:
            return True
    return False


def _result(case, status, stage, reason, snr_db=None, max_abs=None, note="") -> CaseResult:
    return CaseResult(case.name, case.op_type, status, stage, reason, snr_db, max_abs, note)


_REASON_HEADS = (
    "cannot import: the nodes that fall back to onnxruntime do not load there",
    "cannot import",
    "unsupported at run time",
    "not compiled, fell back",
    "compile failed",
    "cannot load the build",
    "failed to run",
    "known deviation",
)
_REASON_DETAILS = tuple(
    (re.compile(pattern), label)
    for pattern, label in (
        (r"^((?:crashed: .+?|timed out after \S+ s) during \w+)", "{0}"),
        (r"IR version: (\d+)", "IR version {0} is newer than the runtime reads"),
        (r"Opset (\d+) is", "opset {0} is newer than the runtime knows"),
        (r"ValidateOpsetForDomain", "opset newer than the runtime knows"),
        (r"implementation for (\w+)\((\d+)\)", "no kernel for {0}-{1}"),
        (r"([\w.]+:\w+)\(-?\d+\) is not a registered", "unknown operator {0}"),
        (r"while running (\w+) node", "error while running {0}"),
        (r"Numpy_type \d+ can't be converted", "onnxruntime's Python binding takes no such dtype"),
        (r"has no converter for \w+", "TVM has no converter for the operator"),
        (r"dtype \S+, expected", "wrong dtype"),
        (r"shape \S+ instead of", "wrong shape"),
        (r"NaN/inf values do not match", "NaN/inf values differ"),
        (r"(?:max_abs|mean_rel|max_rel|cosine|snr_db|top1|top5) \S+ [<>]", "wrong values"),
    )
)


def _reason_kind(reason: str, candidate: str = "") -> str:
    """The reason without case-specific detail, to count cases by it: its head (where it
    failed) and the kind of error, else the start of the message."""
    text = re.sub(f"(^|: ){re.escape(candidate)}: ", r"\1", reason) if candidate else reason
    head = next((h for h in _REASON_HEADS if text.startswith(h)), "")
    for pattern, label in _REASON_DETAILS:
        found = pattern.search(text)
        if found:
            detail = label.format(*found.groups())
            return f"{head}: {detail}" if head else detail
    if not head:
        return text.split(":")[0].split("'")[0].strip() or text
    # Error messages go on with paths, names, sizes and TVM's error context: keep the gist.
    gist = _NOISE.sub("", text[len(head) :]).lstrip(": ")
    gist = re.split(r"\[|\{|ErrorContext", gist)[0]
    return f"{head}: {gist[:100].rstrip(' :,')}"


_NOISE = re.compile(
    r"\[ONNXRuntimeError\] : \d+ : \w+ : |Load model from \S+ failed:| \(\d+ vs\. \d+\)"
    r"|\(\d+ nodes\): "
)


def _read_case(case_dir: Path) -> NodeCase:
    model = onnx.load(case_dir / "model.onnx")
    data = case_dir / "test_data_set_0"
    tensor_types = [v.type.HasField("tensor_type") for v in model.graph.input]
    inputs = [
        _read_tensor(p) if tensor_types[j] else None
        for j, p in enumerate(sorted(data.glob("input_*.pb"), key=_index))
    ]
    out_types = [v.type.HasField("tensor_type") for v in model.graph.output]
    outputs = [
        _read_tensor(p) if j < len(out_types) and out_types[j] else None
        for j, p in enumerate(sorted(data.glob("output_*.pb"), key=_index))
    ]
    return NodeCase(case_dir.name, model, inputs, outputs)


def _index(path: Path) -> int:
    return int(path.stem.rsplit("_", 1)[1])


def _read_tensor(path: Path) -> np.ndarray:
    tensor = onnx.TensorProto()
    tensor.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(tensor)


def _generated_cases() -> list[NodeCase]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the definitions overflow casts on purpose
        from onnx.backend.test.case import node

        collected = node.collect_testcases()
    cases = []
    for case in sorted(collected, key=lambda c: c.name):
        if not case.data_sets:
            continue
        inputs, outputs = case.data_sets[0]
        cases.append(NodeCase(case.name, case.model, _arrays(inputs), _arrays(outputs)))
    return cases


def _arrays(values) -> list:
    """As the data files hold them: tensors as arrays (numpy scalars too)."""
    return [
        numpy_helper.to_array(v)
        if isinstance(v, onnx.TensorProto)
        else np.asarray(v)
        if isinstance(v, np.generic | np.ndarray)
        else v
        for v in values
    ]
