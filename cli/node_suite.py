"""``workbench accuracy --node-suite --candidate NAME``: a candidate on the onnx package's
~1,900 operator test cases, with counts per stage and a Markdown coverage table."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from cli.common import EXIT_OK
from engine.accuracy.metrics import Thresholds
from engine.accuracy.node_suite import Isolation, node_cases, suite_options
from engine.accuracy.node_suite import run_node_suite as run_suite
from engine.errors import EngineError


def run_node_suite(args: argparse.Namespace, values: dict) -> int:
    candidate = values.get("candidate", "tvm")
    if args.model is not None or candidate.endswith(".onnx"):
        raise EngineError("--node-suite takes a candidate name and no model", code="usage")
    try:
        pattern = re.compile(args.cases or "")
        thresholds = Thresholds.from_dict(
            {**Thresholds.strict().to_dict(), **values.get("thresholds", {})}
        )
    except (re.error, TypeError, ValueError) as e:
        raise EngineError(str(e), code="usage") from e
    if args.timeout_s <= 0 or args.workers < 1:
        raise EngineError("--timeout-s must be positive and --workers at least 1", code="usage")
    cases = [case for case in node_cases() if pattern.search(case.name)]
    if not cases:
        raise EngineError(f"no node test case matches '{args.cases}'", code="usage")
    report = run_suite(
        candidate,
        cases,
        thresholds=thresholds,
        options=suite_options(candidate, None if args.in_process else args.timeout_s),
        isolation=None if args.in_process else Isolation(args.timeout_s, args.workers),
        progress=lambda fraction, message: print(message, file=sys.stderr),
    )
    if args.markdown:
        Path(args.markdown).write_text(report.markdown())
    print(json.dumps(report.to_dict()) if args.json else report.table())
    return EXIT_OK
