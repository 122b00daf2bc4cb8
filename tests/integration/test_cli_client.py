"""The `workbench` CLI as a CI pipeline uses it: submit to a live server, wait, gate."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from rest_framework.authtoken.models import Token

from tests.conftest import ROOT, SQUEEZENET
from workbench.models import Artifact, OnnxModel

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def workbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_submit_wait_and_gate(user, web, tmp_path):
    token = Token.objects.create(user=user).key
    common = ["--url", web, "--token", token, "--json"]
    ok = workbench(
        "submit",
        str(SQUEEZENET),
        "--stages",
        "analyze,profile,memory",
        "--wait",
        "--max-params",
        "2e6",
        "--gate",
        "profile.latency_ms<=10000",
        "--gate",
        "memory.arena_bytes<=64e6",
        "--junit",
        str(tmp_path / "ok.xml"),
        "--summary",
        str(tmp_path / "ok.json"),
        *common,
    )
    assert ok.returncode == 0, ok.stderr
    report = json.loads(ok.stdout)
    assert report["status"] == "succeeded" and report["passed"] is True
    assert json.loads((tmp_path / "ok.json").read_text()) == report
    gates = {g["key"]: g for g in report["gates"]}
    assert gates["analyze.params"]["value"] == 1_235_496
    assert gates["profile.latency_ms"]["basis"].startswith("measured on ")
    assert gates["memory.arena_bytes"]["unit"] == "bytes"
    # Progress went to stderr while waiting, one line per change.
    assert "profile" in ok.stderr and "succeeded" in ok.stderr
    suite = validate_junit(tmp_path / "ok.xml")
    # one case for the run, one per stage (3), one per gate (3)
    assert suite.get("tests") == "7" and suite.get("failures") == "0"

    # Against the first run as a baseline: the same model passes 1.0x on counted figures
    # and fails a tighter one; the JUnit report names the gate and the figure.
    first = str(report["run"])
    tight = workbench(
        "submit",
        str(SQUEEZENET),
        "--wait",
        "--baseline",
        first,
        "--gate",
        "analyze.macs<=1.0*baseline",
        "--gate",
        "analyze.params<0.5*baseline",
        "--junit",
        str(tmp_path / "tight.xml"),
        *common,
    )
    assert tight.returncode == 3, tight.stderr
    passed = {g["expression"]: g["passed"] for g in json.loads(tight.stdout)["gates"]}
    assert passed == {"analyze.macs<=1.0*baseline": True, "analyze.params<0.5*baseline": False}
    suite = validate_junit(tmp_path / "tight.xml")
    (failure,) = suite.iter("failure")
    assert "analyze.params = 1.2355e+06" in failure.get("message")
    assert "0.5 x the baseline's" in failure.get("message")

    # A gate that cannot be read, or a baseline gate without a baseline, is a usage error
    # before anything is uploaded.
    typo = workbench("submit", str(SQUEEZENET), "--wait", "--gate", "profile.latency<=5", *common)
    assert typo.returncode == 2 and "unknown figure 'profile.latency'" in typo.stderr
    assert "profile.latency_ms" in typo.stderr
    unnamed = workbench("wait", first, "--gate", "analyze.macs<=baseline", *common)
    assert unnamed.returncode == 2 and "--baseline RUN" in unnamed.stderr
    # A figure of a stage the run did not run fails its gate and says why.
    missing = workbench("wait", first, "--gate", "compile.speed_vs_onnxruntime>=1.0", *common)
    assert missing.returncode == 3
    assert "did it run the compile stage?" in json.loads(missing.stdout)["gates"][0]["reason"]

    # The model's pinned baseline stands in for --baseline RUN.
    second = str(json.loads(tight.stdout)["run"])
    OnnxModel.objects.filter(runs__pk=int(first)).update(baseline_run_id=int(first))
    pinned = workbench(
        "wait", second, "--baseline", "pinned", "--gate", "analyze.macs<=baseline", *common
    )
    assert pinned.returncode == 0, pinned.stderr
    assert json.loads(pinned.stdout)["baseline"] == int(first)

    result = workbench("result", first, "analyze", "--url", web, "--token", token)
    assert json.loads(result.stdout)["macs"] == 349_151_936
    compared = workbench("compare", first, str(json.loads(tight.stdout)["run"]), *common)
    assert compared.returncode == 0, compared.stderr
    rows = {r["key"]: r for r in json.loads(compared.stdout)["figures"]}
    assert rows["analyze.macs"]["deltas"] == [{"direction": "same", "pct": 0.0, "ratio": 1.0}]
    # The second run had no profile: its per-op column says so instead of zeros.
    assert "no per-op profile times in run" in json.loads(compared.stdout)["ops"]["note"]


def validate_junit(path):
    """The report against the JUnit schema CI systems read (Jenkins' junit-10.xsd shape)."""
    import xmlschema

    schema = xmlschema.XMLSchema(str(ROOT / "tests" / "data" / "junit-10.xsd"))
    schema.validate(str(path))
    import xml.etree.ElementTree as ET

    return ET.parse(path).getroot().find("testsuite")


def test_download_verifies_artifacts(user, web, tmp_path):
    token = Token.objects.create(user=user).key
    common = ["--url", web, "--token", token, "--json"]
    run = workbench("submit", str(SQUEEZENET), "--stages", "memory", "--wait", *common)
    assert run.returncode == 0, run.stderr
    run_id = str(json.loads(run.stdout)["run"])
    got = workbench("download", run_id, "--out", str(tmp_path), *common)
    assert got.returncode == 0, got.stderr
    (saved,) = json.loads(got.stdout)["artifacts"]
    plan = json.loads((tmp_path / "memory_plan.json").read_text())
    assert saved["name"] == "memory_plan.json" and plan["valid"] is True
    nothing = workbench("download", run_id, "--stage", "compile", "--out", str(tmp_path), *common)
    assert nothing.returncode == 2 and "no artifacts" in nothing.stderr

    # Someone changes the stored file: the CLI refuses it and writes nothing.
    artifact = Artifact.objects.get(run_id=int(run_id))
    with artifact.file.open("r+b") as f:
        f.seek(0)
        f.write(b"X")
    elsewhere = tmp_path / "tampered"
    tampered = workbench("download", run_id, "--out", str(elsewhere), *common)
    assert tampered.returncode == 1
    assert "memory_plan.json: sha256 mismatch" in tampered.stderr
    assert not (elsewhere / "memory_plan.json").exists()


def test_targets_lists_the_presets():
    listed = json.loads(workbench("targets", "--json").stdout)
    names = {t["name"]: t for t in listed}
    assert names["host"]["kind"] == "measured" and names["host"]["units"] == ["cpu"]
    assert any(t["kind"] == "modeled" and "gpu" in t["units"] for t in listed)


def test_cli_explains_bad_input(user, web):
    token = Token.objects.create(user=user).key
    missing = workbench("submit", "/nonexistent.onnx", "--url", web, "--token", token)
    assert missing.returncode == 2 and "no such file" in missing.stderr
    bad_token = workbench("wait", "1", "--url", web, "--token", "nope")
    assert bad_token.returncode == 2 and "HTTP 401" in bad_token.stderr
    unreachable = workbench("wait", "1", "--url", "http://127.0.0.1:9", "--token", token)
    assert unreachable.returncode == 1 and "cannot reach" in unreachable.stderr
