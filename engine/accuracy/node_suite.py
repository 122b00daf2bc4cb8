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

The cases are read by ``node_cases``; with an :class:`Isolation` they run in worker
processes (``node_isolation``), so that a crash or a hang costs one case only;
``node_report`` holds the results and their tables.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace

import numpy as np
import onnx

from engine.accuracy.candidates import Candidate, available_candidates
from engine.accuracy.errors import CandidateError
from engine.accuracy.metrics import Thresholds, compare_tensors, judge
from engine.accuracy.node_cases import NODE_DATA_DIR, RANDOM_OPS, NodeCase, node_cases, precheck
from engine.accuracy.node_isolation import Isolation, candidate_factory, run_isolated
from engine.accuracy.node_report import (
    STAGES,
    CaseResult,
    NodeSuiteReport,
    case_result,
    describe_error,
)
from engine.errors import ProgressFn

__all__ = [
    "KNOWN_DEVIATIONS",
    "NODE_DATA_DIR",
    "RANDOM_OPS",
    "STAGES",
    "UNSUPPORTED_MARKERS",
    "CaseResult",
    "Isolation",
    "NodeCase",
    "NodeSuiteReport",
    "node_cases",
    "run_case",
    "run_node_suite",
    "suite_options",
]

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


def suite_options(candidate: str, timeout_s: float | None) -> dict:
    """Candidate options for a suite run: one thread (a case is tiny; workers run side by
    side) and, for a compiler with a build time limit of its own, half the case's limit,
    so that a hanging build is reported as the compiler's (its segment falls back)
    rather than as the case timing out."""
    options: dict = {"threads": 1}
    if candidate == "tvm" and timeout_s is not None:
        options["build_timeout_s"] = timeout_s / 2
    return options


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
        factory = candidate_factory(candidate, options or {})
        results = []
        for case in cases:
            results.append(_timed(run_case, factory, case, report.thresholds))
            done(results[-1])
    else:
        results = run_isolated(
            run_case, candidate, options or {}, cases, report.thresholds, isolation, done
        )
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
    result = precheck(case)
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
        return case_result(case, "fail", "compile", f"compile failed: {describe_error(e)}")
    info = candidate.describe()
    if info.get("compiled_nodes", 1) == 0:
        return _not_compiled(case, info.get("fallback") or [])
    enter("run")
    try:
        values = candidate.run(feeds)
    except CandidateError as e:
        return _refused(case, e)
    except Exception as e:  # noqa: BLE001 - a candidate's runtime may raise anything
        return case_result(case, "fail", "run", describe_error(e))
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
    return case_result(case, status, "compare", "; ".join(reasons), worst_snr, worst_abs, note)


def _refused(case: NodeCase, error: CandidateError) -> CaseResult:
    """A typed refusal: unsupported model or usage (skip) or a broken build or run (fail).

    A candidate that cannot be set up at all (not installed) is no case's outcome: raised.
    """
    if error.stage == "setup":
        raise error
    if error.stage == "compile":
        return case_result(case, "fail", "compile", error.message)
    if error.stage != "run":
        return case_result(case, "skip", "import", f"cannot import: {error.message}")
    if any(marker in error.message for marker in UNSUPPORTED_MARKERS):
        return case_result(case, "skip", "run", f"unsupported at run time: {error.message}")
    return case_result(case, "fail", "run", error.message)


def _not_compiled(case: NodeCase, fallback: list[dict]) -> CaseResult:
    """A skip for a candidate that compiled no node itself (``describe()`` says
    ``compiled_nodes: 0``) but handed each to another runtime, with the reason."""
    reason = fallback[0]["reason"] if fallback else "no node left to compile"
    stage = "compile" if "compile" in reason else "import"
    return case_result(case, "skip", stage, f"not compiled, fell back: {reason}")


def _fallback_note(fallback: list[dict]) -> str:
    if not fallback:
        return ""
    ops = sorted({f.get("op_type", "?") for f in fallback})
    return f"{len(fallback)} nodes fell back ({', '.join(ops)}): {fallback[0]['reason']}"


def _timed(run, *args) -> CaseResult:
    started = time.perf_counter()
    result = run(*args)
    return replace(result, seconds=round(time.perf_counter() - started, 3))


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
