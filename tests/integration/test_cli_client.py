"""The `workbench` CLI as a CI pipeline uses it: submit to a live server, wait, gate."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from rest_framework.authtoken.models import Token

from tests.conftest import ROOT, SQUEEZENET

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def workbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_submit_wait_and_gate(user, web):
    token = Token.objects.create(user=user).key
    common = ["--url", web, "--token", token, "--json"]
    ok = workbench(
        "submit",
        str(SQUEEZENET),
        "--stages",
        "analyze,profile",
        "--wait",
        "--max-params",
        "2e6",
        "--max-latency-ms",
        "10000",
        *common,
    )
    assert ok.returncode == 0, ok.stderr
    report = json.loads(ok.stdout)
    assert report["status"] == "succeeded" and report["passed"] is True
    gates = {g["name"]: g for g in report["gates"]}
    assert gates["params"]["value"] == 1_235_496
    assert gates["latency_ms (median)"]["kind"].startswith("measured on ")

    # The same bytes again reuse the model; a tighter gate fails with exit code 3.
    tight = workbench("submit", str(SQUEEZENET), "--wait", "--max-macs", "1e6", *common)
    assert tight.returncode == 3, tight.stderr
    assert json.loads(tight.stdout)["gates"][0]["passed"] is False

    result = workbench("result", str(report["run"]), "analyze", "--url", web, "--token", token)
    assert json.loads(result.stdout)["macs"] == 349_151_936


def test_download_verifies_artifacts(user, web, tmp_path):
    token = Token.objects.create(user=user).key
    common = ["--url", web, "--token", token, "--json"]
    run = workbench("submit", str(SQUEEZENET), "--stages", "memory", "--wait", *common)
    assert run.returncode == 0, run.stderr
    got = workbench("download", str(json.loads(run.stdout)["run"]), "--out", str(tmp_path), *common)
    assert got.returncode == 0, got.stderr
    (saved,) = json.loads(got.stdout)["artifacts"]
    plan = json.loads((tmp_path / "memory_plan.json").read_text())
    assert saved["name"] == "memory_plan.json" and plan["valid"] is True
    nothing = workbench(
        "download",
        str(json.loads(run.stdout)["run"]),
        "--stage",
        "compile",
        "--out",
        str(tmp_path),
        *common,
    )
    assert nothing.returncode == 2 and "no artifacts" in nothing.stderr


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
