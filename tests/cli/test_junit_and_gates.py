"""The CLI's JUnit report and its gate arguments, without a server."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import xmlschema
from onnx_builders import LIGHT_DIR

from cli.junit import junit_xml
from cli.main import main

SCHEMA = xmlschema.XMLSchema(str(Path(__file__).parents[1] / "data" / "junit-10.xsd"))


def report(status="succeeded", error=None, gates=()):
    return {
        "run": 7,
        "status": status,
        "error": error,
        "stages": [{"stage": "compile", "status": "failed", "duration_s": 1.5, "error": error}]
        if error
        else [{"stage": "analyze", "status": "succeeded", "duration_s": 0.2}],
        "gates": list(gates),
    }


def test_control_characters_in_messages_still_make_valid_xml(tmp_path):
    noisy = "\x1b[31mTVMError\x1b[0m: \x00 bad kernel"
    path = tmp_path / "r.xml"
    path.write_bytes(junit_xml(report("failed", noisy)))
    SCHEMA.validate(str(path))
    failure = ET.parse(path).getroot().find("testsuite/testcase/failure")
    assert "TVMError" in failure.get("message") and "\x1b" not in failure.get("message")


def test_a_run_that_did_not_succeed_is_a_failed_case(tmp_path):
    path = tmp_path / "r.xml"
    path.write_bytes(junit_xml(report("cancelled")))
    SCHEMA.validate(str(path))
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite.get("failures") == "1"
    assert suite.find("testcase[@name='run']/failure").get("type") == "run_cancelled"


def test_gates_without_wait_are_a_usage_error(capsys):
    model = str(LIGHT_DIR / "light_squeezenet.onnx")
    code = main(["submit", model, "--gate", "analyze.macs<=1", "--url", "http://127.0.0.1:9"])
    assert code == 2 and "need --wait" in capsys.readouterr().err
