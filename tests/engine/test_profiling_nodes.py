"""Per-node profiling with onnxruntime's profiler on tiny inline models (measured, so the
assertions on times are loose; the strict agreement figures are in bench/profile_bench.py)."""

from __future__ import annotations

import dataclasses
import statistics
import time

import numpy as np
import pytest
from onnx import helper, numpy_helper
from onnx_builders import build, weight

from engine.errors import Cancelled, EngineError
from engine.graph import analyze_model
from engine.profiling import nodes
from engine.profiling.attribution import covered_nodes
from engine.profiling.latency import quietest_stretch
from engine.profiling.nodes import NodeProfileConfig, profile_nodes
from engine.profiling.session import (
    SPIN_ALWAYS,
    SPIN_DURING_RUNS,
    harrell_davis_median,
    make_inputs,
    open_session,
    run_once,
)
from engine.profiling.trace import KernelSamples, Trace, central_runs, interleave, parse_trace

QUICK = NodeProfileConfig(window_s=0.2, min_runs=5, warmup_runs=2)


def small_cnn():
    """x[1,16,56,56] -> Conv+Relu -> Conv+Relu -> MaxPool -> GAP -> Flatten -> Gemm -> Softmax."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1] * 4),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1] * 4),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p"], name="pool", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "wf"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], name="softmax"),
    ]  # fmt: skip
    weights = [
        weight("w1", (32, 16, 3, 3)),
        weight("b1", (32,)),
        weight("w2", (32, 32, 3, 3)),
        weight("wf", (10, 32)),
    ]
    return build(nodes, [("x", [1, 16, 56, 56])], [("y", [1, 10])], weights)


NAMES = ["conv1", "relu1", "conv2", "relu2", "pool", "gap", "flatten", "fc", "softmax"]


@pytest.fixture(scope="module")
def profile():
    return profile_nodes(small_cnn(), QUICK)


def test_every_node_is_reported_in_order(profile):
    assert [op.name for op in profile.ops] == NAMES
    assert all(op.latency_us is not None and op.latency_us >= 0 for op in profile.ops)
    assert profile.measured and profile.runs >= QUICK.min_runs
    assert (
        profile.latency_ms["median"] > 0
        and profile.latency_ms["p90"] >= profile.latency_ms["median"]
    )


def test_fused_relus_share_their_conv_kernel(profile):
    ops = {op.name: op for op in profile.ops}
    assert ops["conv1"].status == "measured" and ops["conv1"].kernel == "conv1"
    assert ops["relu1"].status == "fused" and ops["relu1"].kernel == "conv1"
    kernel = next(k for k in profile.kernels if k.name == "conv1")
    assert kernel.nodes == ["conv1", "relu1"]
    assert ops["conv1"].latency_us + ops["relu1"].latency_us == pytest.approx(kernel.latency_us)
    assert ops["relu1"].latency_us < 0.01 * ops["conv1"].latency_us  # only its FLOPs count
    assert ops["conv1"].flops == 2 * 32 * 56 * 56 * 16 * 9 + 32 * 56 * 56


def test_shares_add_up_and_every_kernel_is_mapped(profile):
    assert sum(op.share_pct for op in profile.ops) == pytest.approx(100.0)
    assert all(k.nodes for k in profile.kernels)
    assert profile.kernel_sum_ms == pytest.approx(sum(op.latency_us for op in profile.ops) / 1e3)


def test_without_optimization_every_node_is_its_own_kernel():
    result = profile_nodes(
        small_cnn(), NodeProfileConfig(window_s=0.1, min_runs=3, graph_optimization="disabled")
    )
    assert {op.status for op in result.ops} == {"measured"}
    assert [k.name for k in result.kernels] == NAMES


def test_environment_is_recorded(profile):
    env = profile.to_dict()["environment"]
    assert env["runtime"].startswith("onnxruntime ")
    assert env["machine"]["logical_cores"] >= 1
    assert env["graph_optimization"] == "extended" and env["intra_op_threads"] == 0
    assert set(env["load_avg_1m"]) == {"before", "after"}


def test_whole_model_latency_is_timed_with_the_profiler_off_next_to_a_plain_session():
    result = profile_nodes(small_cnn(), NodeProfileConfig(window_s=0.2, min_runs=5, reference=True))
    reference = result.reference
    # Per-op statistics from the profiled runs; the whole model from as many runs again
    # (at least min_runs) with the profiler off, each next to one of the plain session.
    assert result.runs >= 5 and result.latency_runs >= 5
    assert reference["runs"] == result.latency_runs
    assert result.profiled_ms["median"] > 0
    plain = reference["latency_ms"]["median"]
    # The 10% agreement itself is measured by the benchmark, not asserted under load.
    assert reference["agreement_pct"] == pytest.approx(
        100 * (result.latency_ms["median"] / plain - 1)
    )
    assert reference["overhead_ratio"] > 0


def test_repeated_profiles_agree_loosely_on_ops_over_100_us():
    config = NodeProfileConfig(window_s=0.5, min_runs=10)
    first, second = profile_nodes(small_cnn(), config), profile_nodes(small_cnn(), config)
    slow = [
        (a.latency_us, b.latency_us)
        for a, b in zip(first.ops, second.ops, strict=True)
        if a.latency_us > 100 and a.status == "measured"
    ]
    assert slow, "the model should have ops over 100 us"
    for a, b in slow:
        assert 0.33 < a / b < 3  # medians; other processes share the cores


def test_cancellation_propagates():
    def cancel(fraction, message):
        if message.startswith("profiling"):
            raise Cancelled("stop")

    with pytest.raises(Cancelled):
        profile_nodes(small_cnn(), NodeProfileConfig(window_s=5, min_runs=1000), cancel)


def test_a_bad_optimization_level_is_refused():
    with pytest.raises(EngineError) as caught:
        NodeProfileConfig(graph_optimization="max")
    assert caught.value.code == "invalid_config"


def test_trace_events_are_assigned_to_runs_and_warmup_is_skipped():
    def run(ts, dur):
        return {"cat": "Session", "name": "model_run", "ts": ts, "dur": dur}

    def kernel(name, ts, dur, op="Conv"):
        return {"cat": "Node", "name": f"{name}_kernel_time", "ts": ts, "dur": dur,
                "args": {"op_name": op}}  # fmt: skip

    events = [
        run(0, 100), kernel("a", 10, 50), kernel("b", 60, 30, "Relu"),  # warm-up
        run(200, 100), kernel("a", 210, 40), kernel("b", 260, 20, "Relu"),
        run(400, 120), kernel("a", 410, 60), kernel("b", 480, 30, "Relu"),
        kernel("stray", 900, 5),
    ]  # fmt: skip
    trace = parse_trace(events, skip_runs=1)
    assert trace.runs_us == [100.0, 120.0]
    assert [(k.name, k.op_type, k.samples_us, k.runs) for k in trace.kernels] == [
        ("a", "Conv", [40.0, 60.0], [0, 1]),
        ("b", "Relu", [20.0, 30.0], [0, 1]),
    ]


def test_fused_gemm_kernels_map_back_to_their_gemm():
    """onnxruntime names a Gemm fused with its Relu 'fused <gemm>'."""
    nodes = [
        helper.make_node("Gemm", ["x", "w"], ["h"], name="fc1", transB=1),
        helper.make_node("Relu", ["h"], ["y"], name="relu"),
    ]
    model = build(nodes, [("x", [1, 512])], [("y", [1, 256])], [weight("w", (256, 512))])
    result = profile_nodes(model, QUICK)
    assert [k.nodes for k in result.kernels] == [["fc1", "relu"]]
    assert result.kernels[0].name == "fused fc1"
    assert [op.status for op in result.ops] == ["measured", "fused"]
    # every kernel mapped (the heap-pages and machine-load warnings depend on how pytest
    # was started and on what else the machine runs: a 20 us model's blocks can differ by
    # the 2 us floor)
    assert not [w for w in result.warnings if "could not be mapped" in w]


def test_a_heap_on_small_pages_is_named_with_the_fix(monkeypatch):
    small = {"transparent_huge_pages": "madvise", "malloc_huge_pages": False}
    monkeypatch.setattr(nodes, "heap_pages", lambda: small)
    (warning,) = [w for w in profile_nodes(small_cnn(), QUICK).warnings if "4 KiB" in w]
    assert "GLIBC_TUNABLES=glibc.malloc.hugetlb=1" in warning
    huge = {"transparent_huge_pages": "madvise", "malloc_huge_pages": True}
    monkeypatch.setattr(nodes, "heap_pages", lambda: huge)
    assert not [w for w in profile_nodes(small_cnn(), QUICK).warnings if "4 KiB" in w]


def test_the_environment_records_how_the_heap_is_paged(monkeypatch):
    from engine.profiling.session import heap_pages

    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1")
    pages = heap_pages()
    assert pages["malloc_huge_pages"] == (pages["transparent_huge_pages"] in ("always", "madvise"))
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")
    assert heap_pages()["malloc_huge_pages"] == (pages["transparent_huge_pages"] == "always")


def test_typical_times_add_up_to_a_typical_run(profile):
    typical = sum(op.typical_us for op in profile.ops)
    assert typical == pytest.approx(sum(k.typical_us for k in profile.kernels))
    # the kernels run back to back: a typical run is its kernels plus a little overhead
    assert 0.5 * profile.typical_ms * 1e3 < typical <= profile.typical_ms * 1e3


def test_central_runs_leave_out_the_slow_and_the_fast():
    assert central_runs([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 80.0]) == {2, 3, 4, 5}
    assert central_runs([5.0]) == {0}
    kernel = KernelSamples("k", "Conv", [1.0, 2.0, 9.0], [0, 1, 3])
    assert kernel.mean_over({0, 1, 2}) == pytest.approx(1.0)  # run 2: not run, counts 0


def test_a_profile_pools_runs_by_turns_over_several_sessions(profile):
    assert profile.stability["sessions"] == QUICK.sessions == 3
    assert profile.stability["stable"] in (True, False)
    assert profile.runs == profile.stability["stop"] - profile.stability["start"]
    assert profile.runs <= profile.stability["recorded_runs"]


def test_interleaved_traces_number_runs_by_turns_and_remember_sessions():
    first = Trace([10.0, 11.0], [KernelSamples("a", "Conv", [1.0, 2.0], [0, 1])])
    second = Trace([20.0], [KernelSamples("a", "Conv", [5.0], [0]), KernelSamples("b", "Relu", [3.0], [0])])  # fmt: skip
    merged = interleave([first, second])
    assert merged.runs_us == [10.0, 20.0, 11.0]
    a, b = merged.kernels
    assert (a.name, a.runs, a.sessions, a.samples_us) == (
        "a",
        [0, 2, 1],
        [0, 0, 1],
        [1.0, 2.0, 5.0],
    )
    assert (b.name, b.runs, b.sessions) == ("b", [1], [1])
    kept = merged.subset(range(1, 3))
    assert kept.runs_us == [20.0, 11.0]
    assert [(k.name, k.runs, k.sessions) for k in kept.kernels] == [("a", [1, 0], [0, 1]), ("b", [0], [1])]  # fmt: skip


def test_an_op_median_averages_the_sessions_medians():
    kernel = KernelSamples("a", "Gemm", [100.0, 102.0, 98.0, 200.0, 202.0, 198.0], [0] * 6, [0, 0, 0, 1, 1, 1])  # fmt: skip
    assert kernel.median_us() == pytest.approx(150.0)


def test_harrell_davis_median_is_smooth_where_the_sample_median_jumps():
    assert harrell_davis_median([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(3.0)
    assert harrell_davis_median([7.0]) == 7.0
    # an op whose runs fall into two groups: one run more in the slow group moves the
    # sample median across the gap, the Harrell-Davis median only part of the way
    fast, slow = [300.0] * 10, [500.0] * 9
    before, after = fast + slow, fast[:-1] + slow + [500.0]
    assert statistics.median(after) - statistics.median(before) == 200.0
    assert 0 < harrell_davis_median(after) - harrell_davis_median(before) < 100.0


def test_the_quietest_stretch_skips_blocks_another_process_slowed_down():
    quiet, loaded = [10.0] * 4, [14.0] * 4
    stretch = quietest_stretch(loaded + quiet + quiet + quiet + loaded, 4, 3, 3.0)
    assert (stretch.start, stretch.stop, stretch.stable) == (4, 16, True)
    assert stretch.block_medians_ms == [14.0, 10.0, 10.0, 10.0, 14.0]
    # the last blocks agree: they are taken, even if slower than earlier ones
    assert quietest_stretch(quiet + loaded * 3, 4, 3, 3.0).start == 4
    # never steady: the least disturbed stretch, flagged
    ramp = [10.0] * 4 + [12.0] * 4 + [14.0] * 4 + [16.0] * 4
    stretch = quietest_stretch(ramp, 4, 3, 3.0)
    assert (stretch.start, stretch.stable) == (0, False)
    # fewer runs than blocks: all of them
    assert quietest_stretch([1.0, 1.0], 1, 3, 3.0).stop == 2


def test_a_load_change_extends_the_window_and_warns(monkeypatch):
    # blocks that never agree (a tiny model's block medians can tie within the 2 us floor
    # whatever the tolerance): the window grows to its limit
    config = NodeProfileConfig(window_s=0.1, min_runs=6, warmup_runs=1, stable_pct=1e-9, max_extend=2.0)  # fmt: skip
    monkeypatch.setattr(nodes, "agree", lambda medians, pct: False)
    result = profile_nodes(small_cnn(), config)
    assert result.stability["recorded_runs"] > result.runs
    # (the chosen blocks may still tie: the profiler's times are whole microseconds)
    warned = any("load changed while profiling" in w for w in result.warnings)
    assert warned == (not result.stability["stable"])

    def never_steady(*args):
        return dataclasses.replace(quietest_stretch(*args), stable=False)

    monkeypatch.setattr(nodes, "quietest_stretch", never_steady)
    result = profile_nodes(small_cnn(), config)
    (warning,) = [w for w in result.warnings if "load changed while profiling" in w]
    assert f"least disturbed {result.runs} runs" in warning


def test_bad_repetition_settings_are_refused():
    with pytest.raises(ValueError, match="at least 1"):
        NodeProfileConfig(sessions=0)


def test_block_medians_a_microsecond_apart_agree_on_a_tiny_model():
    from engine.profiling.latency import agree

    assert agree([0.020, 0.021, 0.0205], 3.0)  # 5% apart, but one microsecond
    assert not agree([0.020, 0.025], 3.0)
    assert agree([10.0, 10.2], 3.0) and not agree([10.0, 10.4], 3.0)
    assert not agree([], 3.0)


def test_every_session_makes_at_least_min_runs_and_the_plain_session_runs_once_a_turn():
    # a window the first runs fill: the run count is what ends it
    config = NodeProfileConfig(window_s=0.001, min_runs=7, sessions=3, reference=True)
    result = profile_nodes(small_cnn(), config)
    assert result.stability["recorded_runs"] >= 21
    memory = result.stability["memory_bound"]
    assert memory["memory_kernels"] >= 1 and memory["compute_kernels"] >= 1  # pool; convs
    # the overhead ratio compares the profiled runs with plain runs taken once per turn
    assert result.reference["overhead_ratio"] > 0


def _other_threads_cpu_ms(session, feeds, wait_s: float = 0.2) -> float:
    """CPU time the process's other threads take while the caller keeps its own core busy
    for ``wait_s`` after a run: what the session's idle pool threads take from the rest."""
    session.run(None, feeds)
    process, thread = time.process_time(), time.thread_time()
    started = time.perf_counter()
    while time.perf_counter() - started < wait_s:
        pass
    return 1e3 * ((time.process_time() - process) - (time.thread_time() - thread))


def test_a_session_spinning_during_runs_only_leaves_the_cores_when_its_run_returns():
    cpu_ms = {}
    for spinning in (SPIN_ALWAYS, SPIN_DURING_RUNS):
        session = open_session(small_cnn(), threads=2, optimization="extended", spinning=spinning)
        feeds, _ = make_inputs(session, {}, 0)
        cpu_ms[spinning] = _other_threads_cpu_ms(session, feeds)
    # onnxruntime's default: the pool thread spins on after the run (about 10 ms measured)
    assert cpu_ms[SPIN_ALWAYS] > 1.0
    assert cpu_ms[SPIN_DURING_RUNS] < 1.0


def test_the_sessions_of_a_profile_spin_only_while_they_run_and_the_environment_says_so(
    monkeypatch,
):
    opened = []

    def recording(*args, **kwargs):
        opened.append(open_session(*args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(nodes, "open_session", recording)
    result = profile_nodes(small_cnn(), dataclasses.replace(QUICK, reference=True))
    assert len(opened) == QUICK.sessions + 1
    for session in opened:
        entry = session.get_session_options().get_session_config_entry
        assert entry("session.force_spinning_stop") == "1"
    threading = result.environment["threading"]
    assert (threading["sessions"], threading["spinning"]) == (4, SPIN_DURING_RUNS)

    # one session alive: nothing to take the cores from, so onnxruntime's default
    opened.clear()
    single = profile_nodes(small_cnn(), dataclasses.replace(QUICK, sessions=1))
    (session,) = opened
    with pytest.raises(RuntimeError):  # not set
        session.get_session_options().get_session_config_entry("session.force_spinning_stop")
    assert single.environment["threading"]["spinning"] == SPIN_ALWAYS


def _plain_median_ms(model, runs: int = 40) -> float:
    session = open_session(model, threads=0, optimization="extended")
    feeds, _ = make_inputs(session, {}, 0)
    times = []
    for _ in range(3 + runs):
        t0 = time.perf_counter()
        run_once(session, feeds)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times[3:])


def test_a_profile_at_all_cores_agrees_with_a_plain_session():
    """With the idle sessions' threads spinning, this measured 2.3-3.9x the plain latency."""
    model = small_cnn()
    before = _plain_median_ms(model)
    profiled = profile_nodes(model, NodeProfileConfig(window_s=0.3, min_runs=10, reference=True))
    after = _plain_median_ms(model)
    # generous: other processes share the cores (the 10% figure is the bench's,
    # bench/profile_threads_bench.py)
    assert profiled.latency_ms["median"] < 1.5 * max(before, after)


def gelu_model():
    """x @ w -> the erf form of GELU as exporters write it: onnxruntime fuses the five nodes
    into one kernel named after the fusion (no node of the model bears that name)."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
        helper.make_node("Div", ["h", "sqrt2"], ["d"], name="gelu/div"),
        helper.make_node("Erf", ["d"], ["e"], name="gelu/erf"),
        helper.make_node("Add", ["e", "one"], ["a"], name="gelu/add"),
        helper.make_node("Mul", ["h", "a"], ["m"], name="gelu/mul"),
        helper.make_node("Mul", ["m", "half"], ["y"], name="gelu/half"),
    ]
    scalars = [
        numpy_helper.from_array(np.array(v, np.float32), n)
        for n, v in (("sqrt2", 1.4142135), ("one", 1.0), ("half", 0.5))
    ]
    return build(nodes, [("x", [4, 64])], [("y", [4, 64])], [weight("w", (64, 64)), *scalars])


def test_a_kernel_onnxruntime_fused_under_a_name_of_its_own_takes_the_nodes_it_covers():
    result = profile_nodes(gelu_model(), QUICK)
    assert not [w for w in result.warnings if "could not be mapped" in w]
    (gelu,) = [k for k in result.kernels if "gelu/erf" in k.nodes]
    assert gelu.name not in {"fc", "gelu/div", "gelu/erf", "gelu/add", "gelu/mul", "gelu/half"}
    assert sorted(gelu.nodes) == ["gelu/add", "gelu/div", "gelu/erf", "gelu/half", "gelu/mul"]
    ops = {op.name: op for op in result.ops}
    assert ops["gelu/erf"].kernel == gelu.name and ops["fc"].kernel != gelu.name


def test_covered_nodes_walk_back_from_the_outputs_to_the_inputs_and_stop_at_owned_nodes():
    graph = analyze_model(gelu_model()).graph
    nodes = {n.name: n for n in graph.nodes}
    gelu = ["gelu/add", "gelu/div", "gelu/erf", "gelu/half", "gelu/mul"]
    assert sorted(covered_nodes(graph, nodes, ["h"], ["y"])) == gelu
    # the MatMul has a kernel of its own: the walk stops there too
    assert sorted(covered_nodes(graph, nodes, [], ["y"], owned={"fc"})) == gelu
    assert sorted(covered_nodes(graph, nodes, [], ["y"])) == sorted(["fc", *gelu])
    # a walk that does not meet the inputs within 32 nodes covers nothing, not the model
    chain = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"r{i}") for i in range(40)]
    long = analyze_model(build(chain, [("t0", [4])], [("t40", [4])])).graph
    by_name = {n.name: n for n in long.nodes}
    assert covered_nodes(long, by_name, ["t0"], ["t40"]) == []
    assert len(covered_nodes(long, by_name, ["t30"], ["t40"])) == 10
