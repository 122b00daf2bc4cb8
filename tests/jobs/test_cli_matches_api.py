"""The command line and the web give the same result for the same model, target and
options: one test per stage. The web side is a run created through the REST API and run by
the worker's task (in-process here; tests/integration runs every stage on a real worker),
the CLI side is ``workbench <stage> --json``. Measured figures (latencies) vary between two
measurements; everything else must be equal."""

from __future__ import annotations

import json

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from cli.main import main
from jobs.tasks import run_stage
from tests.conftest import SQUEEZENET
from workbench.models import Run
from workbench.uploads import store_model_file

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_heartbeat")]


@pytest.fixture
def both(user, enqueued, django_capture_on_commit_callbacks, capsys, tmp_path, monkeypatch):
    """``both(path, stage, target, options, cli_args)`` -> (API result, CLI result)."""
    monkeypatch.setenv("WORKBENCH_PREPARED_CACHE", str(tmp_path / "cli-cache"))
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")

    def run(path, stage, target, options, cli_args):
        model = store_model_file(path, owner=user, name="m.onnx")
        with django_capture_on_commit_callbacks(execute=True):
            response = api.post(
                "/api/v1/runs/",
                {"model": model.pk, "target": target, "stages": [stage], "options": options},
                format="json",
            )
        assert response.status_code == 201, response.content
        run = Run.objects.get(pk=response.json()["id"])
        for _ in run.config["stages"]:
            with django_capture_on_commit_callbacks(execute=True):
                run_stage.apply(args=[enqueued[-1].pk])
        web = api.get(f"/api/v1/runs/{run.pk}/stages/{stage}/").json()
        assert web["status"] == "succeeded", web
        command = {"memory": "memplan"}.get(stage, stage)
        capsys.readouterr()
        code = main([command, str(path), "--target", target, *cli_args, "--json"])
        out, err = capsys.readouterr()
        assert code == 0, err
        return web["result"], json.loads(out)

    return run


def _without(result: dict, *keys: str) -> dict:
    return {k: v for k, v in result.items() if k not in keys}


def test_analyze(both):
    web, cli = both(SQUEEZENET, "analyze", "host", {}, ["--nodes"])
    web["preparation"].pop("seconds"), cli["preparation"].pop("seconds")
    for key in set(web["preparation"]) | set(cli["preparation"]):
        assert web["preparation"].get(key) == cli["preparation"].get(key), key
    assert _without(web, "analysis_s") == _without(cli, "analysis_s")


def test_profile_predicted_is_identical(both):
    web, cli = both(SQUEEZENET, "profile", "phone-snapdragon835", {}, [])
    assert web == cli


def test_profile_measured(both):
    options = {"profile": {"threads": 1, "window_s": 0.2, "tvm_kernels": False}}
    web, cli = both(SQUEEZENET, "profile", "host", options,
                    ["--threads", "1", "--window-s", "0.2", "--no-tvm-kernels"])  # fmt: skip
    assert web.keys() == cli.keys()
    assert [o["name"] for o in web["ops"]] == [o["name"] for o in cli["ops"]]
    for key in ("target", "measured", "unit", "threads", "graph_optimization", "inputs"):
        assert web[key] == cli[key], key
    assert web["latency_ms"] == pytest.approx(cli["latency_ms"], rel=0.5)  # measured twice


def test_partition(both):
    options = {"partition": {"algorithms": ["heft", "chain-dp", "hope-heuristic"]}}
    web, cli = both(SQUEEZENET, "partition", "phone-snapdragon835", options,
                    ["--algorithms", "heft,chain-dp,hope-heuristic", "--schedule"])  # fmt: skip
    for result in (web, cli):
        for algorithm in result["results"].values():
            algorithm.pop("solve_s")
        for summary in result["algorithms"].values():
            summary.pop("solve_s")
        for key in [k for k in result["execution_check"] if k.endswith("_s")]:
            result["execution_check"].pop(key)
    for key in set(web["execution_check"]) | set(cli["execution_check"]):
        assert web["execution_check"].get(key) == cli["execution_check"].get(key), key
    assert web == cli


def test_memory(both):
    options = {"memory": {"compare_tvm": False}}
    web, cli = both(SQUEEZENET, "memory", "host", options, ["--no-compare-tvm"])
    for result in (web, cli):
        result.pop("planner_time_s"), result.pop("planning_s")
        result.pop("order_tried")
    assert web == cli


# What differs between two compiles of the same model with the same options: the measured
# figures, where the artifact was written and its files' digests, which build cache each
# used and what it held.
COMPILE_MEASURED = (
    "builds",
    "latency_ms",
    "onnxruntime_latency_ms",
    "speed_vs_onnxruntime",
    "timing",
    "peak_memory",
    "timings_s",
    "artifact",
    "artifact_files",
)


def test_compile(both, real_model, tmp_path):
    # The backend and conv-layout choices go by measured times, which differ between two
    # runs: with both fixed the same build comes out of both (the choices are tested in
    # the engine).
    options = {"compile": {"threads": 1, "choose_backends": False, "conv_layout": "blocked"}}
    path = real_model("resnet_ts")
    out = str(tmp_path / "artifact")
    # The worker compiles through its tuning store (PostgreSQL): the CLI gets one too.
    store = str(tmp_path / "records")
    web, cli = both(path, "compile", "host", options,
                    ["--threads", "1", "--no-choose-backends", "--conv-layout", "blocked",
                     "--tuning-store", store, "--out", out,
                     "--build-cache", str(tmp_path / "builds")])  # fmt: skip
    for result in (web, cli):
        for kernel in result["kernels"]:
            kernel.pop("time_us"), kernel.pop("share")
        result["simplify"].pop("seconds")
    assert web["kernels"] and web["backend_choice"] == []
    assert web["conv_layout"]["chosen"] == cli["conv_layout"]["chosen"] == "blocked"
    assert _without(web, *COMPILE_MEASURED) == _without(cli, *COMPILE_MEASURED)
    # The same files ship (their bytes hold build times: zip and tar dates).
    assert web["artifact_files"].keys() == cli["artifact_files"].keys()


def test_accuracy(both):
    options = {"accuracy": {"candidate": "fp16"}}
    web, cli = both(SQUEEZENET, "accuracy", "host", options, ["--candidate", "fp16"])
    web.pop("timing_s"), cli.pop("timing_s")
    assert web == cli
