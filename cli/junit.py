"""A run and its gates as a JUnit XML report, the format CI systems read (Jenkins, GitLab,
GitHub Actions reporters): one test suite per run, one test case per stage and per gate."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime


def junit_xml(report: dict) -> bytes:
    """``report`` as :func:`cli.client._wait` builds it: run, status, stages, gates."""
    run = report["run"]
    suite = ET.Element("testsuite", name=f"workbench run {run}")
    cases = []
    for stage in report.get("stages", []):
        case = ET.Element(
            "testcase",
            name=f"stage {stage['stage']}",
            classname=f"workbench.run{run}.stages",
            time=f"{stage.get('duration_s') or 0:.3f}",
        )
        if stage["status"] == "failed":
            failure = ET.SubElement(
                case, "failure", message=stage.get("error") or "failed", type="stage_failed"
            )
            failure.text = stage.get("error") or ""
        elif stage["status"] != "succeeded":
            ET.SubElement(case, "skipped", message=f"stage {stage['status']}")
        cases.append(case)
    for gate in report.get("gates", []):
        case = ET.Element(
            "testcase",
            name=f"gate {gate['expression']}",
            classname=f"workbench.run{run}.gates",
            time="0.000",
        )
        if not gate["passed"]:
            failure = ET.SubElement(case, "failure", message=gate["reason"], type="gate_failed")
            failure.text = f"{gate['reason']}\nwhat it is: {gate['basis']}"
        else:
            out = ET.SubElement(case, "system-out")
            out.text = f"{gate['reason']}\nwhat it is: {gate['basis']}"
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
