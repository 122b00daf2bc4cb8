"""A run and its gates as a JUnit XML report, the format CI systems read (Jenkins, GitLab,
GitHub Actions reporters): one test suite per run, one test case per stage and per gate."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime

# What XML 1.0 cannot hold (compiler and runtime messages carry ANSI escapes and NULs).
_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _text(value) -> str:
    return _ILLEGAL.sub("?", str(value))


def junit_xml(report: dict) -> bytes:
    """``report`` as :func:`cli.client._wait` builds it: run, status, stages, gates."""
    run = report["run"]
    suite = ET.Element("testsuite", name=f"workbench run {run}")
    # The run itself: a CI job that exits 3 must not show green.
    whole = ET.Element("testcase", name="run", classname=f"workbench.run{run}", time="0.000")
    if report["status"] != "succeeded":
        message = _text(report.get("error") or f"the run is {report['status']}")
        ET.SubElement(
            whole, "failure", message=message, type=f"run_{report['status']}"
        ).text = message
    cases = [whole]
    for stage in report.get("stages", []):
        case = ET.Element(
            "testcase",
            name=_text(f"stage {stage['stage']}"),
            classname=f"workbench.run{run}.stages",
            time=f"{stage.get('duration_s') or 0:.3f}",
        )
        if stage["status"] == "failed":
            error = _text(stage.get("error") or "failed")
            ET.SubElement(case, "failure", message=error, type="stage_failed").text = error
        elif stage["status"] != "succeeded":
            ET.SubElement(case, "skipped", message=f"stage {stage['status']}")
        cases.append(case)
    for gate in report.get("gates", []):
        case = ET.Element(
            "testcase",
            name=_text(f"gate {gate['expression']}"),
            classname=f"workbench.run{run}.gates",
            time="0.000",
        )
        text = _text(f"{gate['reason']}\nwhat it is: {gate['basis']}")
        if not gate["passed"]:
            reason = _text(gate["reason"])
            ET.SubElement(case, "failure", message=reason, type="gate_failed").text = text
        else:
            ET.SubElement(case, "system-out").text = text
        cases.append(case)
    failures = sum(1 for c in cases if c.find("failure") is not None)
    skipped = sum(1 for c in cases if c.find("skipped") is not None)
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", str(skipped))
    suite.set("time", f"{sum(float(c.get('time')) for c in cases):.3f}")
    suite.set("timestamp", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S"))
    suite.extend(cases)
    suites = ET.Element(
        "testsuites",
        name="workbench",
        tests=suite.get("tests"),
        failures=suite.get("failures"),
        errors="0",
        time=suite.get("time"),
    )
    suites.append(suite)
    ET.indent(suites)
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True)
