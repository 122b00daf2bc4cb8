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


def test_cli_explains_bad_input(user, web):
    token = Token.objects.create(user=user).key
    missing = workbench("submit", "/nonexistent.onnx", "--url", web, "--token", token)
    assert missing.returncode == 2 and "no such file" in missing.stderr
    bad_token = workbench("wait", "1", "--url", web, "--token", "nope")
    assert bad_token.returncode == 2 and "HTTP 401" in bad_token.stderr
    unreachable = workbench("wait", "1", "--url", "http://127.0.0.1:9", "--token", token)
    assert unreachable.returncode == 1 and "cannot reach" in unreachable.stderr
