"""Every partitioning algorithm, judged by the shared simulator and validator."""

from __future__ import annotations

import math

import pytest

from engine.errors import Cancelled
from engine.partition import (
    PartitionError,
    PartitionOptions,
    compare_algorithms,
    partition_model,
    random_dag,
    simulate,
    validate,
)
from engine.partition.bisection import bisect_ops, partition_ops
from engine.partition.blocks import key_op_blocks
from engine.partition.chain_dp import live_bytes
from engine.partition.hope_heuristic import merge_super_ops
from engine.partition.synthetic import chain_dag, inception_dag

HEURISTICS = ("heft", "hope-heuristic", "chain-dp", "blocks", "single-unit")
SMALL = {
    "random12x3": lambda: random_dag(12, 3, seed=1),
    "random16x2": lambda: random_dag(16, 2, seed=3),
    "random20x3": lambda: random_dag(20, 3, seed=4),
    "inception2x2": lambda: inception_dag(2, 2),
    "inception2x3": lambda: inception_dag(2, 3),
    "inception3x2": lambda: inception_dag(3, 2),
}
EXACT = PartitionOptions(time_limit_s=60.0)


@pytest.fixture(scope="module")
def solved():
    """Each small problem with the exact plan and every heuristic's, solved once."""
    cache = {}

    def get(name):
        if name not in cache:
            problem = SMALL[name]()
            results = {a: partition_model(problem, a, EXACT) for a in (*HEURISTICS, "hope-ilp")}
            cache[name] = (problem, results)
        return cache[name]

    return get


@pytest.mark.parametrize("name", sorted(SMALL))
def test_exact_is_never_worse_than_any_heuristic(solved, name):
    problem, results = solved(name)
    exact = results["hope-ilp"]
    assert exact.plan.status == "optimal" and exact.gap < 1e-4  # the bound absorbs rounding
    gaps = {a: r.makespan_ms / exact.makespan_ms - 1 for a, r in results.items()}
    print(f"{name} ({problem.n} ops): heuristic gaps to the exact makespan {gaps}")
    # Integer time steps (10^7 per hint makespan) allow a rounding slack of ~4n steps.
    assert min(gaps.values()) >= -1e-4


@pytest.mark.parametrize("name", sorted(SMALL))
def test_every_plan_is_valid(solved, name):
    problem, results = solved(name)
    for algorithm, result in results.items():
        assert result.valid, (algorithm, result.errors)
        assert validate(problem, result.schedule) == []
        assert sorted(result.schedule.order) == list(range(problem.n))


def test_exact_bound_is_a_true_lower_bound(solved):
    problem, results = solved("random20x3")
    bound = results["hope-ilp"].plan.bound_us
    assert all(r.schedule.makespan_us >= bound * (1 - 1e-9) for r in results.values())


def test_exact_replay_matches_the_solver(solved):
    # The simulator is monotone: replaying the solver's order never makes it longer.
    problem, results = solved("inception3x2")
    exact = results["hope-ilp"]
    assert exact.plan.details["returned"] == "solver"
    assert exact.schedule.makespan_us <= exact.plan.bound_us * (1 + 1e-4)


def _greedy_list(problem):
    """Reference greedy list scheduling: the earliest-ready op (ties: lowest index) goes
    to the unit where it completes first (ties: finish, then lowest unit)."""
    n = problem.n
    waiting = [len(p) for p in problem.preds]
    ready_at, finish = [0.0] * n, [0.0] * n
    placement, free, order = [-1] * n, [0.0] * len(problem.units), []
    queue = [i for i in range(n) if not waiting[i]]
    while queue:
        i = min(queue, key=lambda i: (ready_at[i], i))
        queue.remove(i)
        best = None
        for u in problem.supported[i]:
            arrive = problem.release_us[i][u]
            for k in problem.in_tensors[i]:
                t = problem.tensors[k]
                if t.src is not None:
                    moved = problem.transfer_us(t.bytes, placement[t.src], u)
                    arrive = max(arrive, finish[t.src] + (moved if placement[t.src] != u else 0))
            end = max(free[u], arrive) + problem.latency_us[i][u]
            key = (end + problem.output_us[i][u], end, u)
            best = key if best is None or key < best else best
        _, end, u = best
        placement[i], finish[i], free[u] = u, end, end
        order.append(i)
        for s in problem.succs[i]:
            ready_at[s] = max(ready_at[s], end)
            waiting[s] -= 1
            if not waiting[s]:
                queue.append(s)
    return tuple(placement), tuple(order)


@pytest.mark.parametrize("problem", [random_dag(60, 3, seed=9), inception_dag(4, 3), chain_dag(30)])
def test_window_of_one_is_greedy_list_scheduling(problem):
    options = PartitionOptions(k=1, merge_short_us=0)
    result = partition_model(problem, "hope-heuristic", options)
    placement, order = _greedy_list(problem)
    assert result.schedule.placement == placement
    assert result.schedule.order == order
    assert result.schedule.makespan_us == simulate(problem, placement, order).makespan_us


def test_a_wider_window_finds_a_better_schedule_here():
    problem = inception_dag(3, 2)
    makespans = {
        k: partition_model(
            problem, "hope-heuristic", PartitionOptions(k=k, merge_short_us=0)
        ).schedule.makespan_us
        for k in (1, 4)
    }
    assert makespans[4] < makespans[1]


def test_super_op_merging_only_merges_single_predecessor_ops():
    problem = random_dag(80, 2, seed=5)
    groups = merge_super_ops(problem, threshold_us=30.0)
    assert 1 < len(groups) < problem.n
    assert sorted(i for g in groups for i in g) == list(range(problem.n))
    for group in groups:
        for i in group[1:]:
            assert len(problem.preds[i]) == 1 and problem.preds[i][0] in group
            assert problem.min_latency(i) <= 30.0
    result = partition_model(problem, "hope-heuristic", PartitionOptions(merge_short_us=30.0))
    assert result.valid and result.plan.details["super_ops"] == len(groups)


def test_bisection_parts_are_disjoint_cover_acyclic_and_small():
    problem = random_dag(300, 3, seed=11)
    parts = partition_ops(problem, nt=12, eps=0.2)
    ops = [i for part in parts for i in part]
    assert sorted(ops) == list(range(problem.n))  # disjoint and covering
    assert all(len(part) < 12 for part in parts)
    index = {i: k for k, part in enumerate(parts) for i in part}
    assert all(index[e.src] <= index[e.dst] for e in problem.edges)  # quotient is acyclic


def test_bisection_is_balanced_within_eps():
    problem = random_dag(300, 3, seed=11)
    first, second = bisect_ops(list(range(problem.n)), problem.preds, problem.succs, 0.2)
    assert max(len(first), len(second)) <= (1 + 0.2) * problem.n / 2
    assert not any(e.src in set(second) and e.dst in set(first) for e in problem.edges)


def test_bisection_splits_a_graph_without_ranks():
    # 20 independent ops all have rank 1: no threshold exists, the split goes by order.
    problem = random_dag(1, 2)  # template for units
    from engine.partition.problem import Op, PartitionProblem

    flat = PartitionProblem(
        tuple(Op(f"o{i}") for i in range(20)), problem.units, ((1.0, 1.0),) * 20
    )
    parts = partition_ops(flat, nt=6, eps=0.2)
    assert sorted(i for p in parts for i in p) == list(range(20)) and max(map(len, parts)) < 6


def test_pre_partitioned_exact_solves_a_large_graph():
    problem = random_dag(300, 3, seed=2)
    result = partition_model(problem, "hope-ilp", PartitionOptions(time_limit_s=30.0))
    assert result.valid
    assert result.plan.status in ("optimal-parts", "feasible-parts")
    assert result.plan.details["parts"] >= 300 // 12
    heft = partition_model(problem, "heft")
    assert result.makespan_ms <= heft.makespan_ms  # never worse than its hint
    assert 0.0 <= result.gap < 1.0


def test_heuristics_handle_a_thousand_ops():
    problem = random_dag(1000, 3, seed=42)
    for algorithm in HEURISTICS:
        assert partition_model(problem, algorithm).valid


def test_chain_dp_on_a_chain_is_optimal_and_segmented():
    problem = chain_dag(12, 2, seed=1)
    result = partition_model(problem, "chain-dp")
    exact = partition_model(problem, "hope-ilp", EXACT)
    assert math.isclose(result.makespan_ms, exact.makespan_ms, rel_tol=1e-4)
    assert live_bytes(problem)[1:] == [t.bytes for t in problem.tensors[1:-1]]


def test_blocks_cut_at_joins_and_split_branches():
    problem = inception_dag(2, 2)
    blocks = key_op_blocks(problem, PartitionOptions().key_ops)
    names = [[problem.ops[i].name for i in b] for b in blocks]
    # The branch MaxPool inside a module does not cut; each of the 4 branches is a block.
    assert ["m0_3x3_reduce", "m0_3x3"] in names and ["m0_pool", "m0_pool_proj"] in names
    assert ["m0_concat"] in names
    index = {i: k for k, b in enumerate(blocks) for i in b}
    assert all(index[e.src] <= index[e.dst] for e in problem.edges)
    result = partition_model(problem, "blocks")
    assert result.makespan_ms <= result.best_single_unit_ms


def test_inception_gains_and_a_chain_has_little_to_gain():
    options = PartitionOptions(time_limit_s=30.0)
    branchy = compare_algorithms(inception_dag(3, 2), options=options)
    assert not branchy["little_to_gain"] and branchy["gain_pct"] > 10
    assert "partitioning helps" in branchy["verdict"]
    chain = compare_algorithms(chain_dag(24, 2, seed=3), options=options)
    assert chain["little_to_gain"] and "little to gain" in chain["verdict"]
    assert chain["best_makespan_ms"] <= chain["best_single_unit_ms"]


def test_result_json_has_the_documented_keys():
    result = partition_model(inception_dag(1, 2), "heft").to_dict()
    assert {"algorithm", "makespan_ms", "best_single_unit_ms", "solve_s", "valid", "gap"} <= set(
        result
    )
    assert {"placement", "order", "timeline", "transfers", "unit_busy_us"} <= set(result)
    assert set(result["placement"].values()) <= {"cpu", "gpu"}
    assert {"op", "unit", "start_us", "finish_us"} <= set(result["timeline"][0])
    assert {"src", "dst", "bytes", "start_us", "finish_us", "link"} <= set(result["transfers"][0])


def test_unknown_algorithm_and_single_unit_baselines():
    problem = inception_dag(1, 3)
    with pytest.raises(PartitionError, match="unknown partitioning algorithm"):
        partition_model(problem, "nope")
    assert partition_model(problem, "single:cpu").schedule.placement == (0,) * problem.n
    with pytest.raises(PartitionError, match="cannot run every op"):
        partition_model(problem, "single:dsp")  # the synthetic DSP has no Concat


def test_progress_is_reported_and_can_cancel_the_exact_solve():
    problem = random_dag(100, 2, seed=1)
    seen = []
    partition_model(problem, "hope-ilp", EXACT, lambda f, message: seen.append(f))
    assert seen[0] == 0.0 and seen[-1] == 1.0 and len(seen) > 5
    assert seen == sorted(seen)

    def cancel(fraction, message):
        if fraction > 0.3:
            raise Cancelled("stopped by the user")

    with pytest.raises(Cancelled):
        partition_model(problem, "hope-ilp", EXACT, cancel)
