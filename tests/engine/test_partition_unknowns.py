"""Unknown is never zero, never infinity: what the partition stage does with costs and sizes
it does not know, with ops of 0 us, with horizons a naive integer scale overflows, and with a
plan that fails validation."""

from __future__ import annotations

import dataclasses
import math

import pytest
from onnx import TensorProto, helper
from onnx_builders import analysis_of, build

from engine.graph import analyze_model
from engine.partition import (
    Link,
    Network,
    Op,
    PartitionError,
    PartitionOptions,
    PartitionProblem,
    Tensor,
    compare_algorithms,
    partition_model,
    registry,
    simulate,
    simulator,
    validate,
)
from engine.partition.mobile_cloud import cut_costs
from engine.partition.registry import Plan
from engine.partition.targets import problem_for_target
from engine.targets import get_target

ALGORITHMS = ("hope-ilp", "hope-heuristic", "heft", "chain-dp", "blocks", "single-unit")
PHONE = "phone-snapdragon835"
FAST = PartitionOptions(time_limit_s=5.0)


# -- unknown costs: the builder refuses, naming the nodes ------------------------------------


def _runtime_shaped_reshape():
    """x -> relu -> reshape(shape computed from x's values) -> relu2: the reshape's output
    shape is unknown, as in torch exports whose shape arithmetic is not folded."""
    one = helper.make_tensor("one", TensorProto.INT64, [1], [1])
    return build(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("ReduceMax", ["r"], ["m"], name="max", keepdims=0),
            helper.make_node("Cast", ["m"], ["n"], name="cast", to=TensorProto.INT64),
            helper.make_node("Reshape", ["n", "one"], ["n1"], name="as_vector"),
            helper.make_node("Concat", ["n1", "one"], ["s"], name="shape", axis=0),
            helper.make_node("Reshape", ["r", "s"], ["y0"], name="reshape"),
            helper.make_node("Relu", ["y0"], ["y"], name="relu2"),
        ],
        [("x", [1, 4, 8, 8])],
        [("y", None)],
        [one],
    )


def test_an_op_of_unknown_cost_is_refused_with_its_name_and_why():
    graph = analyze_model(_runtime_shaped_reshape()).graph
    with pytest.raises(PartitionError) as caught:
        problem_for_target(graph, get_target(PHONE))
    error = caught.value
    assert error.code == "unknown_cost"
    assert "node reshape (Reshape): output shape unknown" in error.message
    assert "node relu2 (Relu): shape of input y0 unknown" in error.message
    assert "shape of 'y0' (output of Reshape 'reshape') is unknown" in error.hint
    assert "--shape" not in error.hint  # the inputs' shapes are known already


def test_a_symbolic_input_asks_for_its_shape():
    model = build([helper.make_node("Relu", ["x"], ["y"], name="relu")], [("x", ["N", 8])], [])
    model.graph.output.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, None))
    graph = analyze_model(model).graph
    cloud = get_target("cloud-xeon-e5-2620v4")  # the mobile-cloud problem refuses it too
    with pytest.raises(PartitionError, match=r"node relu \(Relu\): shape of input x unknown") as e:
        problem_for_target(graph, get_target(PHONE), cloud=cloud, network="4g")
    assert "Give the shape of x" in e.value.hint


# -- unknown sizes: never priced as 0 bytes ----------------------------------------------------


def _pair(nbytes: int | None, links: bool = True) -> PartitionProblem:
    """a -> b, the tensor between them of ``nbytes``; the gpu is 10x faster, over a link."""
    return PartitionProblem(
        ops=(Op("a", "Conv"), Op("b", "Conv")),
        units=("cpu", "gpu"),
        latency_us=((100.0, 10.0), (100.0, 10.0)),
        tensors=(
            Tensor("x", 1000, None, (0,)),
            Tensor("t", nbytes, 0, (1,)),
            Tensor("y", 1000, 1, (), is_output=True),
        ),
        links=(Link("cpu", "gpu", 5.0, 1.0), Link("gpu", "cpu", 5.0, 1.0)) if links else (),
    )


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_tensor_of_unknown_size_that_may_cross_a_link_is_refused(algorithm):
    problem = _pair(None)
    assert problem.unpriced == (1,)
    with pytest.raises(PartitionError, match="tensor t \\(output of node a \\(Conv\\)\\)") as e:
        partition_model(problem, algorithm, FAST)
    assert e.value.code == "unknown_size"


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_an_unknown_size_on_shared_memory_costs_nothing_whatever_it_is(algorithm):
    result = partition_model(_pair(None, links=False), algorithm, FAST)
    assert result.valid
    assert result.makespan_ms == pytest.approx(0.02)  # both on the gpu, nothing to move


def test_the_simulator_never_moves_an_unknown_size_for_free():
    problem = _pair(None)
    assert problem.unpriced_moves((0, 1)) == [1] and problem.unpriced_moves((1, 1)) == []
    with pytest.raises(PartitionError, match="size is unknown"):
        simulate(problem, (0, 1), (0, 1))


def _chain(sizes, network: Network, units=("mobile", "cloud")) -> PartitionProblem:
    """input -> conv1 -> pool -> fc -> output on the phone or in the cloud (10x faster)."""
    tensors = [Tensor("x", sizes[0], None, (0,))]
    tensors += [
        Tensor(f"t{i}", sizes[i + 1], i, (i + 1,) if i < 2 else (), i == 2) for i in range(3)
    ]
    rows = ((20_000.0, 2_000.0), (5_000.0, 500.0), (60_000.0, 6_000.0))
    if len(units) == 3:  # an accelerator beside the mobile CPU, runs everything as fast
        rows = tuple((m, m, c) for m, c in rows)
    return PartitionProblem(
        ops=(Op("conv1", "Conv"), Op("pool", "MaxPool"), Op("fc", "Gemm")),
        units=units,
        latency_us=rows,
        tensors=tuple(tensors),
        links=(Link("mobile", "npu", 10.0, 1.0),) if len(units) == 3 else (),
        network=network,
        cloud_unit="cloud",
    )


WIFI = Network("wifi", rtt_ms=5.0, up_mbps=50.0, down_mbps=None, radio_w=1.2)


def test_mobile_cloud_does_not_offer_a_cut_that_sends_an_unknown_size():
    # Known, the pool's 10 kB output is the best cut (37.6 ms over Wi-Fi); of unknown size it
    # must not be offered (counted as 0 bytes, it would look even better).
    known = partition_model(_chain([1_000_000, 200_000, 10_000, 1_000], WIFI), "mobile-cloud")
    assert known.plan.details["best_cut"]["cut"] == "pool"
    result = partition_model(_chain([1_000_000, 200_000, None, 1_000], WIFI), "mobile-cloud")
    curve = {c["cut"]: c for c in result.plan.details["curve"]}
    assert not curve["pool"]["feasible"] and curve["pool"]["bytes"] is None
    assert curve["pool"]["latency_ms"] is None and "tensor t1" in curve["pool"]["reason"]
    best = result.plan.details["best_cut"]
    assert best["cut"] == "conv1" and best["bytes"] == 200_000 and result.valid
    assert all(c["bytes"] is not None for c in curve.values() if c["feasible"])


def test_mobile_cloud_without_a_priced_cut_says_no_plan():
    # The input's size is unknown and the chosen mobile unit (an accelerator) is not the home
    # CPU: every cut moves the input over a link, to the accelerator or to the cloud.
    problem = _chain([None, 200_000, 10_000, 1_000], WIFI, units=("mobile", "npu", "cloud"))
    result = partition_model(problem, "mobile-cloud", PartitionOptions(mobile_unit="npu"))
    assert result.plan is None and not result.valid and result.errors == []
    assert result.reason.startswith("no cut of the mobile-cloud split can be priced")
    assert "tensor x (a graph input)" in result.reason
    data = result.to_dict()
    assert data["plan"] is None and data["makespan_ms"] is None and data["reason"]
    assert not any(c["feasible"] for c in data["details"]["curve"])


def test_cut_costs_never_count_an_unknown_size_as_zero():
    curve = cut_costs(_chain([None, None, None, 1_000], WIFI), mobile=0, cloud=1)
    assert [c["feasible"] for c in curve] == [False, False, False, True]
    assert [c["bytes"] for c in curve] == [None, None, None, 0]  # mobile-only sends nothing


# -- zero-duration ops and the integer scale of the exact solver --------------------------


def _zero_first() -> PartitionProblem:
    """a (10 us) and b (0 us: a view op, launch unknown) on the cpu; c reads b, faster on
    the gpu. The best plan runs b first, at the instant a starts, so that c overlaps a: the
    ViT's Transpose and Reshape_1 case that the validator once called an overlap."""
    return PartitionProblem(
        ops=(Op("a", "Transpose"), Op("b", "Reshape"), Op("c", "MatMul")),
        units=("cpu", "gpu"),
        latency_us=((10.0, None), (0.0, None), (30.0, 10.0)),
        tensors=(
            Tensor("x", 1000, None, (0, 1)),
            Tensor("ta", 1000, 0, (), True),
            Tensor("tb", 1000, 1, (2,)),
            Tensor("tc", 1000, 2, (), True),
        ),
    )


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_zero_duration_ops_give_valid_plans(algorithm):
    problem = _zero_first()
    result = partition_model(problem, algorithm, FAST)
    assert result.valid, result.errors
    if algorithm == "hope-ilp":
        assert result.makespan_ms == pytest.approx(0.01)  # b, then a beside c
        s = result.schedule
        assert s.start_us[1] == s.start_us[0] == 0.0 and s.order.index(1) < s.order.index(0)


def test_validator_accepts_an_instant_op_at_a_boundary_not_inside():
    problem = _zero_first()
    good = simulate(problem, (0, 0, 1), (1, 0, 2))
    assert validate(problem, good) == []
    inside = dataclasses.replace(good, start_us=(0.0, 5.0, 0.0), finish_us=(10.0, 5.0, 10.0))
    assert any("overlap on unit cpu" in e for e in validate(problem, inside))


def _spread(op_us: float, link_us: float) -> PartitionProblem:
    """Six ops of ``op_us`` on either unit; the input reaches the gpu after ``link_us``."""
    n = 6
    return PartitionProblem(
        ops=tuple(Op(f"o{i}", "Relu") for i in range(n)),
        units=("cpu", "gpu"),
        latency_us=((op_us, op_us),) * n,
        tensors=(Tensor("x", 8, None, tuple(range(n))),)
        + tuple(Tensor(f"t{i}", 8, i, (), True) for i in range(n)),
        links=(Link("cpu", "gpu", link_us, 1.0), Link("gpu", "cpu", link_us, 1.0)),
    )


@pytest.mark.parametrize(
    ("op_us", "link_us"),
    [
        (0.0, 1000.0),  # every op free: a naive scale of 10^7 / 1e-9 made 10^19 steps
        (1e-6, 1e6),  # a link 10^12 times an op
        (1e9, 1e-3),  # a horizon of hours, a transfer of a nanosecond
    ],
)
def test_exact_solver_survives_horizons_a_naive_scale_overflows(op_us, link_us):
    result = partition_model(_spread(op_us, link_us), "hope-ilp", FAST)
    assert result.valid and result.plan.status == "optimal"
    heft = partition_model(_spread(op_us, link_us), "heft")
    assert result.makespan_ms <= heft.makespan_ms * (1 + 1e-9)
    assert math.isfinite(result.plan.bound_us) and result.plan.bound_us <= result.makespan_ms * 1e3


def test_a_solver_out_of_time_without_a_solution_says_so(monkeypatch):
    from ortools.sat.python import cp_model

    monkeypatch.setattr(cp_model.CpSolver, "solve", lambda self, model: cp_model.UNKNOWN)
    result = partition_model(_zero_first(), "hope-ilp", FAST)
    assert result.valid and result.plan.status == "time-limit"
    assert result.plan.details["returned"] == "hint"
    assert "no solution within the time limit" in result.plan.details["time_limit"]


# -- every plan is validated before it is returned, compared or chosen -----------------------


def _register(monkeypatch, name, algorithm):
    monkeypatch.setitem(registry._ALGORITHMS, name, algorithm)


def test_a_malformed_plan_is_dropped_with_a_reason(monkeypatch):
    problem = _zero_first()
    _register(monkeypatch, "backwards", lambda p, o, g: Plan((0, 0, 1), (2, 1, 0)))
    result = partition_model(problem, "backwards")
    assert result.plan is None and result.schedule is None and not result.valid
    assert result.reason.startswith("internal error") and "before its input" in result.reason
    assert result.to_dict()["plan"] is None and "timeline" not in result.to_dict()


def test_compare_never_picks_an_overlapping_plan(monkeypatch, caplog):
    problem = _zero_first()
    cheat = (0, 0, 0)  # everything on the cpu at once, "done" after 1 us: the best on paper
    _register(monkeypatch, "cheat", lambda p, o, g: Plan(cheat, (0, 1, 2)))
    real = simulator.simulate

    def overlapping(problem, placement, order):
        schedule = real(problem, placement, order)
        if tuple(placement) != cheat:
            return schedule
        return dataclasses.replace(
            schedule, start_us=(0.0,) * 3, finish_us=(10.0, 0.0, 30.0), makespan_us=1.0
        )

    monkeypatch.setattr(simulator, "simulate", overlapping)
    report = compare_algorithms(problem, ["heft", "cheat", "hope-heuristic"], FAST)
    assert report["best"] in ("heft", "hope-heuristic") and report["best_makespan_ms"] == 0.01
    assert "cheat" not in report["results"] and "cheat" not in report["algorithms"]
    assert report["invalid"] == ["cheat"]
    assert report["failed"]["cheat"].startswith("internal error, the plan is not shown")
    logged = [r.message for r in caplog.records if "cheat made an invalid plan" in r.message]
    assert logged and "a and c overlap on unit cpu" in logged[0]


def test_a_comparison_without_any_plan_says_why():
    problem = _chain([None, 200_000, 10_000, 1_000], WIFI, units=("mobile", "npu", "cloud"))
    report = compare_algorithms(
        problem, ["heft", "mobile-cloud"], PartitionOptions(mobile_unit="npu")
    )
    assert report["best"] is None and report["results"] == {}
    assert "unknown" in report["failed"]["heft"] and "priced" in report["failed"]["mobile-cloud"]
    assert report["verdict"].startswith("no plan (heft: cannot price")


# -- real models ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["vit_small", "mobilenet_v2"])
def test_every_algorithm_plans_the_zoo_models_validly(name):
    # The phone preset leaves launch overheads unknown: every view op takes 0 us here.
    problem = problem_for_target(analysis_of(name).graph, get_target(PHONE))
    assert any("launch overhead unknown" in n for n in problem.notes)
    report = compare_algorithms(problem, options=FAST)
    assert report["failed"] == {} and report["invalid"] == []
    assert set(report["results"]) == {"heft", "hope-heuristic", "chain-dp", "blocks", "hope-ilp"}
    assert report["best_makespan_ms"] <= report["best_single_unit_ms"]


# -- unknown numbers of the target --------------------------------------------------------------


def test_an_unknown_round_trip_is_refused_and_unknown_idle_power_not_invented():
    graph = analysis_of("mobilenet_v2").graph
    phone, cloud = get_target(PHONE), get_target("cloud-xeon-e5-2620v4")
    unknown_rtt = tuple(dataclasses.replace(n, rtt_ms=None) for n in cloud.networks)
    with pytest.raises(PartitionError, match="round trip of network '4g' is unknown"):
        problem_for_target(
            graph, phone, cloud=dataclasses.replace(cloud, networks=unknown_rtt), network="4g"
        )
    power = {u: dataclasses.replace(p, idle_w=None) for u, p in phone.power.items()}
    problem = problem_for_target(graph, dataclasses.replace(phone, power=power))
    assert problem.power == {}
    assert any(n.startswith("idle power unknown") for n in problem.notes)
