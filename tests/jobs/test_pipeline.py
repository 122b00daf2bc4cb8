"""The run state machine, driven in-process (the real worker is in tests/integration)."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from engine.errors import Cancelled
from engine.stages import RunOptions
from jobs.progress import ProgressSink
from jobs.tasks import run_stage
from tests.conftest import SQUEEZENET
from workbench import pipeline
from workbench.models import OnnxModel, Run, StageResult, Target
from workbench.uploads import store_model_file

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_heartbeat")]


@pytest.fixture
def model(user):
    return store_model_file(SQUEEZENET, owner=user, name="sq.onnx")


def make_run(user, model, stages, options=None, capture=None) -> Run:
    with capture(execute=True):
        return pipeline.create_run(
            owner=user,
            model=model,
            target=Target.objects.get(name="host"),
            options=RunOptions.from_dict(stages, options),
        )


def test_stages_run_in_order_and_the_run_succeeds(
    user, model, enqueued, django_capture_on_commit_callbacks
):
    run = make_run(
        user,
        model,
        ["profile"],
        {"profile": {"window_s": 0.2, "tvm_kernels": False}},
        django_capture_on_commit_callbacks,
    )
    assert [s.stage for s in enqueued] == ["analyze"]
    with django_capture_on_commit_callbacks(execute=True):
        assert run_stage.apply(args=[enqueued[0].pk]).get() == "succeeded"
    assert [s.stage for s in enqueued] == ["analyze", "profile"]
    run.refresh_from_db()
    assert run.status == "running"
    assert 0.4 < run.progress < 0.6
    assert OnnxModel.objects.get(pk=model.pk).analysis["macs"] == 349_151_936
    with django_capture_on_commit_callbacks(execute=True):
        assert run_stage.apply(args=[enqueued[1].pk]).get() == "succeeded"
    run.refresh_from_db()
    assert (run.status, run.progress) == ("succeeded", 1.0)
    profile = run.stages.get(stage="profile").result
    assert profile["measured"] is True
    assert profile["runs"] >= 10
    assert profile["latency_ms"] == profile["latency"]["median"] > 0
    assert profile["environment"]["runtime"].startswith("onnxruntime")
    assert {op["name"] for op in profile["ops"]} >= {
        n["name"] for n in run.model.analysis["node_list"] if n["op_type"] == "Conv"
    }
    assert profile["roofs"]["peak_gflops_fp32"] > 0
    assert profile["findings"] and profile["calibration"]["fits"]


def test_a_bad_model_fails_the_stage_and_skips_the_rest(
    user, model, enqueued, django_capture_on_commit_callbacks, settings
):
    run = make_run(user, model, ["profile"], None, django_capture_on_commit_callbacks)
    # Corrupt the stored bytes behind the validated upload: analyze must say what failed.
    Path(model.file.path).write_bytes(b"\x00garbage")
    assert run_stage.apply(args=[enqueued[0].pk]).get() == "failed"
    run.refresh_from_db()
    assert run.status == "failed"
    assert run.error_code == "invalid_model"
    assert "ONNX" in run.error_message
    assert run.stages.get(stage="profile").status == "skipped"


def test_cancelled_run_is_never_claimed(user, model, enqueued, django_capture_on_commit_callbacks):
    run = make_run(user, model, ["analyze"], None, django_capture_on_commit_callbacks)
    assert pipeline.cancel_run(run)
    assert run_stage.apply(args=[enqueued[0].pk]).get() == "not claimed"
    assert run.stages.get().status == "cancelled"
    assert not pipeline.cancel_run(run)


def test_progress_sink_stops_a_cancelled_stage(
    user, model, enqueued, django_capture_on_commit_callbacks
):
    run = make_run(user, model, ["analyze"], None, django_capture_on_commit_callbacks)
    stage = pipeline.claim_stage(enqueued[0].pk, worker="w1")
    sink = ProgressSink(stage.pk, run.pk)
    sink(0.3, "working")
    assert StageResult.objects.get(pk=stage.pk).progress == pytest.approx(0.3)
    pipeline.cancel_run(run)
    with pytest.raises(Cancelled):
        sink(0.6, "still working")
    # A late finish from the cancelled worker must not overwrite the verdict.
    assert not pipeline.finish_stage(stage, result={"late": True})
    assert Run.objects.get(pk=run.pk).status == "cancelled"


def test_a_stage_whose_worker_died_is_reaped(
    user, model, enqueued, django_capture_on_commit_callbacks, settings
):
    run = make_run(user, model, ["profile"], None, django_capture_on_commit_callbacks)
    stage = pipeline.claim_stage(enqueued[0].pk, worker="celery@lost-host")
    assert pipeline.reap_stale_stages() == 0  # fresh heartbeat: alive
    StageResult.objects.filter(pk=stage.pk).update(
        heartbeat_at=timezone.now() - timedelta(seconds=settings.RUN_STALE_SECONDS + 1)
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert pipeline.reap_stale_stages() == 1
    lost = run.stages.get(stage="analyze")
    assert (lost.status, lost.error_code) == ("failed", "worker_lost")
    assert "lost-host" in lost.error_message
    # The profile does not need the analysis: it runs, and the run is not stuck.
    assert [s.stage for s in enqueued] == ["analyze", "profile"]
    run.refresh_from_db()
    assert run.status == "running"
    with django_capture_on_commit_callbacks(execute=True):
        pipeline.claim_stage(enqueued[1].pk, worker="w2")
        pipeline.fail_stage(enqueued[1].pk, code="time_limit", message="too slow")
    run.refresh_from_db()
    assert (run.status, run.error_code) == ("failed", "worker_lost")
    assert run.error_message.startswith("analyze: ")


def test_redelivered_message_does_not_run_a_live_stage_twice(
    user, model, enqueued, django_capture_on_commit_callbacks
):
    make_run(user, model, ["analyze"], None, django_capture_on_commit_callbacks)
    assert pipeline.claim_stage(enqueued[0].pk, worker="w1") is not None
    assert pipeline.claim_stage(enqueued[0].pk, worker="w2") is None


def test_memory_stage_stores_a_validated_plan_and_shows_it(
    user, model, enqueued, django_capture_on_commit_callbacks, client
):
    run = make_run(
        user, model, ["memory"], {"memory": {"in_place": True}}, django_capture_on_commit_callbacks
    )
    for i in range(2):
        with django_capture_on_commit_callbacks(execute=True):
            assert run_stage.apply(args=[enqueued[i].pk]).get() == "succeeded"
    run.refresh_from_db()
    assert run.status == "succeeded"
    result = run.stages.get(stage="memory").result
    assert result["valid"] is True
    assert result["config"]["in_place"] is True
    best = result["best"]
    assert result["planners"][best] == result["lower_bound_bytes"]  # SqueezeNet: optimal
    assert list(result["plans"]) == [best]
    tvm = result["tvm"]  # TVM's static allocations of the same model, next to ours
    assert tvm["tvm_static_bytes"] > tvm["ours_bytes"] >= tvm["lower_bound_bytes"] > 0
    artifact = run.artifacts.get(stage="memory")
    assert artifact.name == "memory_plan.json" and len(artifact.sha256) == 64
    client.force_login(user)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="memory-lower-bound"' in page and "fig-memory-timeline-data" in page
    assert 'id="memory-tvm-bytes"' in page and "fig-memory-tvm-data" in page


def test_analyze_states_how_the_model_was_prepared(
    user, model, enqueued, django_capture_on_commit_callbacks, client
):
    run = make_run(user, model, ["analyze"], None, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        assert run_stage.apply(args=[enqueued[0].pk]).get() == "succeeded"
    result = run.stages.get().result
    prep = result["preparation"]
    assert prep["nodes_before"] == 105 and prep["nodes_after"] <= 105
    assert [b["shape"] for b in prep["inputs"]] == [[1, 3, 224, 224]]
    assert prep["inputs"][0]["sources"] == ["declared"] * 4 and not prep["defaults_used"]
    assert result["structure"]["blocks"]
    client.force_login(user)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="preparation"' in page and 'id="structure"' in page


def test_partition_stage_compares_algorithms_and_checks_the_split(
    user, enqueued, django_capture_on_commit_callbacks, client
):
    inception = store_model_file(
        SQUEEZENET.parent / "light_inception_v1.onnx", owner=user, name="inception_v1.onnx"
    )
    phone = Target.objects.filter(name__startswith="phone-").first()
    with django_capture_on_commit_callbacks(execute=True):
        run = pipeline.create_run(
            owner=user,
            model=inception,
            target=phone,
            options=RunOptions.from_dict(
                ["partition"],
                {
                    "partition": {
                        "algorithms": ["heft", "hope-heuristic", "chain-dp"],
                        "time_limit_s": 5,
                    }
                },
            ),
        )
    for i in range(2):
        with django_capture_on_commit_callbacks(execute=True):
            assert run_stage.apply(args=[enqueued[i].pk]).get() == "succeeded"
    report = run.stages.get(stage="partition").result
    assert set(report["algorithms"]) == {"heft", "hope-heuristic", "chain-dp"}
    assert all(a["valid"] for a in report["algorithms"].values())
    assert report["verdict"]
    check = report["execution_check"]
    assert check["outputs_match"] and check["boundaries_match"]
    assert run.artifacts.get(stage="partition").name.endswith(".zip")
    client.force_login(user)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="partition-verdict"' in page and "fig-partition-gantt-data" in page
    assert (
        'data-initial="unit"' in page or '"initial_metric": "unit"' in page
    )  # the graph opens coloured by unit


def test_partition_on_a_single_unit_target_says_why_not(
    user, model, enqueued, django_capture_on_commit_callbacks
):
    run = make_run(user, model, ["partition"], None, django_capture_on_commit_callbacks)
    for i in range(2):
        with django_capture_on_commit_callbacks(execute=True):
            run_stage.apply(args=[enqueued[i].pk])
    run.refresh_from_db()
    assert run.status == "succeeded"
    partition = run.stages.get(stage="partition")
    assert partition.status == "not_applicable"
    assert "nothing to partition" in partition.message


def test_profile_on_a_modeled_target_is_predicted_and_says_so(
    user, model, enqueued, django_capture_on_commit_callbacks, client
):
    phone = Target.objects.filter(name__startswith="phone-").first()
    with django_capture_on_commit_callbacks(execute=True):
        run = pipeline.create_run(
            owner=user, model=model, target=phone, options=RunOptions.from_dict(["profile"])
        )
    for i in range(2):
        with django_capture_on_commit_callbacks(execute=True):
            assert run_stage.apply(args=[enqueued[i].pk]).get() == "succeeded"
    result = run.stages.get(stage="profile").result
    assert result["measured"] is False and result["model"].startswith("roofline")
    assert {u["name"] for u in result["units"]} >= {"cpu_big", "gpu"}
    client.force_login(user)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "Latency (predicted for" in page and "not measured" in page
    assert 'data-initial="latency_us"' in page or '"initial_metric": "latency_us"' in page


def test_measured_profile_page_and_calibrated_target(
    user, model, enqueued, django_capture_on_commit_callbacks, client
):
    run = make_run(
        user, model, ["profile"], {"profile": {"window_s": 0.3}}, django_capture_on_commit_callbacks
    )
    for i in range(2):
        with django_capture_on_commit_callbacks(execute=True):
            run_stage.apply(args=[enqueued[i].pk])
    client.force_login(user)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "Latency (measured)" in page and 'data-table="ops"' in page
    stored = {f["key"]: f for f in run.stages.get(stage="profile").figures}
    assert stored["profile.latency_ms"]["measured"] is True  # kept beside the result
    kernels = run.stages.get(stage="profile").result["tvm_kernels"]
    assert kernels["kernels"] and kernels["runs"] >= 10 and kernels["latency_ms"] > 0
    timed = [k for k in kernels["kernels"] if k["median_us"]]
    assert len(timed) == len(kernels["kernels"])  # every launch was timed
    assert sum(k["share_pct"] for k in timed) == pytest.approx(100.0)
    assert any(k["onnxruntime_us"] for k in timed)  # set against the same nodes
    assert 'data-table="tvm-kernels"' in page and "fig-profile-tvm-kernels-data" in page
    assert page.count('<tr><td title="') >= len(timed)  # one row per kernel
    assert 'id="profile-findings"' in page
    # The run as one file: the same figures, every script inline, nothing live.
    exported = client.get(f"/runs/{run.pk}/?export=html")
    assert exported["Content-Disposition"] == f'attachment; filename="run-{run.pk}.html"'
    html = exported.content.decode()
    assert "fig-profile-tvm-kernels-data" in html and "Latency (measured)" in html
    assert not re.search(r"<script[^>]+src=", html) and 'id="cancel-form"' not in html
    saved = client.post(f"/runs/{run.pk}/save-calibration/")
    assert saved.status_code == 302
    target = Target.objects.get(owner=user, name="host-calibrated")
    assert target.kind == "modeled"
    assert target.profile["units"][0]["peak_gflops"]["fp32"] > 0


def test_memory_after_partition_plans_each_unit(
    user, enqueued, django_capture_on_commit_callbacks, client
):
    inception = store_model_file(
        SQUEEZENET.parent / "light_inception_v1.onnx", owner=user, name="inception_v1.onnx"
    )
    phone = Target.objects.filter(name__startswith="phone-").first()
    with django_capture_on_commit_callbacks(execute=True):
        run = pipeline.create_run(
            owner=user,
            model=inception,
            target=phone,
            options=RunOptions.from_dict(
                ["partition", "memory"], {"partition": {"algorithms": ["heft"]}}
            ),
        )
    assert run.config["stages"] == ["analyze", "partition", "memory"]
    for i in range(3):
        with django_capture_on_commit_callbacks(execute=True):
            outcome = run_stage.apply(args=[enqueued[i].pk]).get()
        assert outcome == "succeeded", StageResult.objects.get(pk=enqueued[i].pk).error_message
    per_unit = run.stages.get(stage="memory").result["per_unit"]
    placement = run.stages.get(stage="partition").result["results"]["heft"]["placement"]
    assert per_unit["plan"] == "heft"
    assert set(per_unit["units"]) == set(placement.values())
    assert all(u["arena_bytes"] >= u["lower_bound_bytes"] > 0 for u in per_unit["units"].values())
    client.force_login(user)
    assert 'id="memory-per-unit"' in client.get(f"/runs/{run.pk}/").content.decode()
