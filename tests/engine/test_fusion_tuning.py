"""MetaSchedule tuning through the record store: reuse on a second compile, cancellation.

Budgets are a single round of four or eight trials on two tiny matmuls, so a tuned
compile takes ten to twenty seconds here, mostly starting MetaSchedule's processes.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import helper, numpy_helper
from onnx_builders import build

from engine.errors import Cancelled
from engine.fusion import CompileConfig, compile_model
from engine.fusion.tuning_store import DirectoryStore
from engine.report.compare import RunReports, compare_runs

FAST = {
    "threads": 1,
    "timing_window_s": 0.1,
    "timing_rounds": 1,
    "kernel_timing_runs": 1,
    "choose_backends": False,  # these tests are about the TVM build (backend choice: its own)
}
# MetaSchedule measures up to eight candidates at a time: each budget is one round.
SMALL, LARGER = 4, 8


def dense_model():
    """x[32,64] @ w1[64,64] @ w2[64,16]: two kernels, the first four times the work."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((64, 16)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="dense1"),
        helper.make_node("MatMul", ["h", "w2"], ["y"], name="dense2"),
    ]
    return build(nodes, [("x", [32, 64])], [("y", [32, 16])], [w1, w2])


def stored(store, kind=None) -> list[dict]:
    """The store's kernel entries, the tuned one (it has records) first; with ``kind``,
    its entries of that kind (whole-model checks: "end-to-end")."""
    entries = [json.loads(p.read_text()) for p in store.glob("*/*.json")]
    entries = [e for e in entries if e.get("kind") == kind]
    return sorted(entries, key=lambda e: -len(e["records"]))


def kept_tuned(result: dict) -> bool:
    """Whether the build uses tuned kernels: some beat their default schedule and the
    whole-model check kept them."""
    check = result["tuning"].get("end_to_end") or {"kept": "tuned"}
    return bool(result["tuning"]["improved"] or result["tuning"]["records_used"]) and (
        check["kept"] == "tuned"
    )


def test_second_compile_reuses_the_store_without_tuning(save, tmp_path):
    path, store = save(dense_model()), tmp_path / "store"

    def compile_into(name: str, trials: int) -> dict:
        config = CompileConfig(str(tmp_path / name), tune_trials=trials, tuning_store=store, **FAST)
        return compile_model(path, config).to_dict()

    # The budget affords one task: the heavier kernel is tuned, the other left out.
    first = compile_into("a", SMALL)
    tuning = first["tuning"]
    assert (tuning["workloads"], tuning["records_found"], tuning["tasks_tuned"]) == (2, 0, 1)
    assert tuning["trials"] == SMALL
    tuned, left_out = stored(store)
    assert len(tuned["records"]) == 1 and left_out["records"] == []
    assert tuned["budget_trials"] == left_out["budget_trials"] == SMALL
    assert tuned["default_us"] > left_out["default_us"] > 0
    assert first["outputs_match"] is True
    # A record is used when tuning beat the default schedule on this machine and the
    # whole model measured no slower with it.
    assert ("tuned" in {k["schedule"] for k in first["kernels"]}) == kept_tuned(first)

    for second in (compile_into("b", 0), compile_into("c", SMALL)):
        # Both kernels were settled under this budget: nothing is tuned again.
        assert second["tuning"]["trials"] == 0 and second["tuning"]["tasks_tuned"] == 0
        assert second["tuning"]["records_found"] == 2
        assert second["tuning"]["records_used"] == tuning["improved"]
        schedules = {k["schedule"] for k in second["kernels"]}
        assert ("tuned" in schedules) == kept_tuned(first)
        if tuning["improved"]:  # the first compile's whole-model check is reused
            assert second["tuning"]["end_to_end"]["stored"] is True
        assert second["outputs_match"] is True

    # Set against an untuned build of the same model, the comparison lines the kernels up
    # and says how each and the whole model moved.
    untuned = compile_model(path, CompileConfig(str(tmp_path / "u"), **FAST)).to_dict()
    compared = compare_runs(
        [RunReports(1, "untuned", {"compile": untuned}), RunReports(2, "tuned", {"compile": first})]
    )
    rows = compared["kernels"]["rows"]
    assert len(rows) == 2 and compared["kernels"]["unaligned"] == []
    assert all(r["delta_pct"][0] is not None for r in rows)
    (latency,) = [r for r in compared["figures"] if r["key"] == "compile.latency_ms"]
    assert latency["deltas"][0]["ratio"] == pytest.approx(
        first["latency_ms"] / untuned["latency_ms"]
    )

    # A larger budget tunes again, the search starting from the stored record.
    third = compile_into("d", LARGER)
    assert third["tuning"]["tasks_tuned"] == 1 and third["tuning"]["trials"] == LARGER
    retuned, _ = stored(store)
    assert retuned["budget_trials"] == LARGER and len(retuned["records"]) == 1
    assert retuned["tuned_us"] <= tuned["tuned_us"]


def test_a_kernel_the_model_never_launches_is_settled_too(save, tmp_path, monkeypatch):
    """A flatten between a conv and a matmul lowers to a reshape PrimFunc that runs as a
    view: the model never launches it, so it has no time to tune. Left unsettled, every
    later compile built and timed the defaults again for it (ResNet-50 on an EPYC: 10 s
    of a 38 s second compile). It is settled with the rest: a second compile builds
    nothing to time."""
    from engine.fusion import tuning

    rng = np.random.default_rng(0)
    conv_w = numpy_helper.from_array(rng.standard_normal((32, 16, 1, 1)).astype(np.float32), "w")
    dense_w = numpy_helper.from_array(rng.standard_normal((2048, 10)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[1, 1]),
        helper.make_node("Relu", ["y"], ["r"], name="relu"),
        helper.make_node("Flatten", ["r"], ["f"], name="flat"),
        helper.make_node("MatMul", ["f", "w2"], ["z"], name="dense"),
    ]
    path = save(build(nodes, [("x", [1, 16, 8, 8])], [("z", [1, 10])], [conv_w, dense_w]))
    store = tmp_path / "store"

    def compile_into(name: str) -> dict:
        config = CompileConfig(
            str(tmp_path / name), tune_trials=SMALL, tuning_store=store, conv_layout="nchw", **FAST
        )
        return compile_model(path, config).to_dict()

    first = compile_into("a")["tuning"]
    never = [k for k in first["kernels"] if k["calls"] == 0]
    assert never and all(k["default_us"] is None for k in never)  # unknown, not zero
    assert DirectoryStore(store).count() >= first["workloads"]

    def no_timing(*args, **kwargs):
        raise AssertionError("a settled model's defaults were built and timed again")

    monkeypatch.setattr(tuning, "_time_defaults", no_timing)
    second = compile_into("b")
    assert second["tuning"]["records_found"] == second["tuning"]["workloads"]
    assert second["tuning"]["trials"] == 0 and second["outputs_match"] is True


def test_a_store_keeps_the_faster_record_and_the_larger_budget(tmp_path):
    store = DirectoryStore(tmp_path)
    fast = {"records": ["fast"], "tuned_us": 5.0, "default_us": 9.0, "budget_trials": 8}
    store.put("t", "w", fast)
    store.put("t", "w", {"records": [], "tuned_us": None, "default_us": 8.0, "budget_trials": 4})
    assert store.get("t", "w") == {**fast, "default_us": 8.0}
    store.put(
        "t", "w", {"records": ["slow"], "tuned_us": 6.0, "default_us": 9.5, "budget_trials": 16}
    )
    assert store.get("t", "w") == {**fast, "default_us": 9.5, "budget_trials": 16}
    store.put(
        "t", "w", {"records": ["faster"], "tuned_us": 4.0, "default_us": 9.0, "budget_trials": 8}
    )
    assert store.get("t", "w")["records"] == ["faster"] and store.count() == 1


def test_raising_cancelled_from_progress_stops_tuning(save, tmp_path):
    messages = []

    def progress(fraction, message):
        messages.append(message)
        if message.startswith("tuning:"):
            raise Cancelled("stopped by the user")

    store = tmp_path / "store"
    config = CompileConfig(str(tmp_path / "c"), tune_trials=64, tuning_store=store, **FAST)
    with pytest.raises(Cancelled):
        compile_model(save(dense_model()), config, progress)
    assert "trials" in messages[-1] and "estimated latency" in messages[-1]
    assert DirectoryStore(store).count() == 0  # a cancelled tuning leaves nothing behind


def test_a_damaged_record_in_the_store_is_ignored_not_fatal():
    from engine.fusion.tuning import _load_records

    class Broken:
        def get(self, target_key, workload_key):
            return {"records": ["{not json"], "default_us": 10.0, "tuned_us": 1.0}

    class Workload:
        key, mod = "w", None
        default_us = tuned_us = record = chosen = None
        budget_trials = 0

    workload = Workload()
    assert _load_records({"w": workload}, Broken(), "t") == (0, 0)
    assert workload.record is None and workload.chosen is None


def test_the_whole_model_check_keeps_the_faster_build_and_remembers(save, tmp_path, monkeypatch):
    """Kernels that each beat their default schedule can still make the model slower:
    the compile times the model both ways, keeps the faster and stores the outcome."""
    from engine.fusion import tuning as tuning_module
    from engine.fusion import whole_model_check as check_module

    path, store = save(dense_model()), tmp_path / "store"
    # Every tuned kernel counts as faster than its default, so the set is never empty.
    monkeypatch.setattr(tuning_module, "_beats", lambda tuned_us, default_us: tuned_us is not None)

    def compile_into(name: str) -> dict:
        # with the kernel split, whose verdict is stored under the build that ships
        options = {**FAST, "choose_backends": True}
        config = CompileConfig(
            str(tmp_path / name), tune_trials=SMALL, tuning_store=store, **options
        )
        return compile_model(path, config).to_dict()

    timed = []
    real_timing = check_module.time_alternating

    def tuned_slower(first, second, spec, config, report, *split):
        if split:  # the kernel split's timing (a plan worth building, by the profiles)
            return real_timing(first, second, spec, config, report, *split)
        tuned_ms, default_ms, runs = real_timing(first, second, spec, config, report)
        timed.append((tuned_ms, default_ms))
        return default_ms * 2, default_ms, runs  # as if the tuned build were twice as slow

    monkeypatch.setattr(check_module, "time_alternating", tuned_slower)
    first = compile_into("a")
    check = first["tuning"]["end_to_end"]
    assert len(timed) == 1 and all(ms > 0 for ms in timed[0])
    assert check["kept"] == "default" and check["stored"] is False and check["runs"] >= 3
    assert "tuned" not in {k["schedule"] for k in first["kernels"]}
    assert first["outputs_match"] is True
    assert not (tmp_path / "a" / "artifact-default").exists()
    (entry,) = stored(store, kind="end-to-end")
    assert entry["kept"] == "default" and entry["tuned_us"] == 2 * entry["default_us"]

    assert first["kernel_split"]["tried"] is True and "stored" not in first["kernel_split"]

    # The same tuned kernels again: the stored outcome decides, nothing is timed. The
    # split's verdict was reached on the defaults that ship and is found under them.
    second = compile_into("b")
    assert len(timed) == 1
    assert second["tuning"]["end_to_end"] == {**check, "stored": True}
    assert "tuned" not in {k["schedule"] for k in second["kernels"]}
    assert second["kernel_split"].get("stored") is True, (
        first["kernel_split"],
        second["kernel_split"],
    )


def test_the_whole_model_check_keeps_tuned_kernels_that_are_faster(
    save, tmp_path, monkeypatch, capsys
):
    """Through the command line, which reports the tuning and the whole-model check."""
    from cli import summaries
    from cli.main import main
    from engine.fusion import tuning as tuning_module
    from engine.fusion import whole_model_check as check_module

    monkeypatch.setattr(tuning_module, "_beats", lambda tuned_us, default_us: tuned_us is not None)
    monkeypatch.setattr(
        check_module,
        "time_alternating",
        lambda first, second, spec, config, report: (1.0, 2.0, 5),
    )
    out = tmp_path / "o"
    argv = ["compile", str(save(dense_model())), "--threads", "1", "--out", str(out)]
    argv += ["--tune-trials", str(SMALL), "--tuning-store", str(tmp_path / "store")]
    # the TVM build is what this is about (FAST's choose_backends=False)
    assert main([*argv, "--no-choose-backends", "--cache-dir", "none", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["tuning"]["end_to_end"]["kept"] == "tuned"
    assert "tuned" in {k["schedule"] for k in result["kernels"]}
    assert result["outputs_match"] is True
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["artifact"]
    # what the command prints without --json
    text = summaries.SUMMARY["compile"](result)
    assert f"tuning                   {SMALL} trials in " in text
    assert "whole_model_check        kept tuned schedules (tuned 1.0 ms, default 2.0 ms)" in text


def test_a_default_build_that_hangs_during_tuning_is_ended(save, tmp_path, monkeypatch):
    """Tuning first builds and times every segment with default schedules; that build has
    the compile's time limit too (TVM's compiler can hang), and its kernels go untuned."""
    import time

    from engine.fusion import tuning

    def hangs(*args, **kwargs):
        time.sleep(120)

    monkeypatch.setattr(tuning, "build_segment", hangs)  # tuning's import of it only
    config = CompileConfig(
        str(tmp_path / "a"),
        tune_trials=SMALL,
        tuning_store=tmp_path / "store",
        build_timeout_s=5.0,
        **FAST,
    )
    started = time.perf_counter()
    result = compile_model(save(dense_model()), config).to_dict()
    assert time.perf_counter() - started < 60
    assert result["tuning"]["tasks_tuned"] == 0 and result["tuning"]["trials"] == 0
    assert result["outputs_match"] is True and not result["fallback_nodes"]


def test_a_tuned_kernel_slower_in_the_model_is_dropped_and_the_verdict_kept(
    save, tmp_path, monkeypatch
):
    """MetaSchedule times a kernel alone; in the model it can run slower than its default
    schedule (ResNet-50's blocked convs: 12 of 14 tuned kernels). Both builds are timed in
    the model, the tuned schedule dropped where it is not faster there, and the verdict
    stored with its record: a second compile builds nothing to check it again."""
    from engine.fusion import tuning as tuning_module

    # Alone, every tuned kernel within 1000x of its default counts as faster (a few trials
    # found schedules 2.5-4x slower than the default ones on an AVX2 CPU)...
    monkeypatch.setattr(
        tuning_module, "_beats", lambda t, d: t is not None and (d is None or t < 1e3 * d)
    )
    # ...and in the model, the tuned build's kernels run 10^4 times as long.
    real_load, real_times = tuning_module._load_build, tuning_module.kernel_times_us
    tuned_vms, loads = set(), []

    def load(seg, mod, spec, tuned, timeout_s):
        loaded = real_load(seg, mod, spec, tuned, timeout_s)
        loads.append(bool(tuned))
        if tuned and loaded:
            tuned_vms.add(id(loaded[0]))
        return loaded

    def times(vm, run, names, runs):
        return {
            k: us * (1e4 if id(vm) in tuned_vms else 1)
            for k, us in real_times(vm, run, names, runs).items()
        }

    monkeypatch.setattr(tuning_module, "_load_build", load)
    monkeypatch.setattr(tuning_module, "kernel_times_us", times)
    path, store = save(dense_model()), tmp_path / "store"

    def compile_into(name: str) -> dict:
        config = CompileConfig(str(tmp_path / name), tune_trials=SMALL, tuning_store=store, **FAST)
        return compile_model(path, config).to_dict()

    first = compile_into("a")
    assert first["tuning"]["trials"] == SMALL
    assert first["tuning"]["in_model"] == {"checked": 1, "dropped": 1}
    assert first["tuning"]["improved"] == 0 and "end_to_end" not in first["tuning"]
    assert "tuned" not in {k["schedule"] for k in first["kernels"]}
    (row,) = [k for k in first["tuning"]["kernels"] if k["in_model"]]
    assert row["in_model"]["tuned_us"] > row["in_model"]["default_us"] > 0
    (entry, _) = stored(store)
    assert entry["in_model"]["record"] and entry["in_model"] == row["in_model"]
    assert first["outputs_match"] is True

    built = len(loads)
    second = compile_into("b")
    assert second["tuning"]["trials"] == 0 and second["tuning"]["in_model"]["checked"] == 0
    assert len(loads) == built  # no build to check the stored verdict again
    assert second["tuning"]["records_used"] == 0
    assert "tuned" not in {k["schedule"] for k in second["kernels"]}
