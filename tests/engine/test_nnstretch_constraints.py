"""Every design NN-Stretch emits (its final grid) satisfies each constraint, one test per
constraint, on MobileNetV2 and EfficientNet-B0 with the phone preset: under the paper's
defaults (CPU branches: no communication) and relaxed (alpha 1, one meeting point, where
GPU branches with their transfers survive). The constraint values are recomputed here
from each segment's original cost and each branch's, not read back from the planner's
verdicts."""

from __future__ import annotations

import math

import pytest
from nnstretch_cases import RELAXED, search, structure

from engine.partition.nnstretch.search import ACCELERATORS, StretchOptions

CASES = [
    ("mobilenet_v2", StretchOptions()),
    ("mobilenet_v2", RELAXED),
    ("efficientnet_b0", StretchOptions()),
]
IDS = ["mobilenet-default", "mobilenet-relaxed", "efficientnet-default"]


def designs(name, options):
    result, pricer = search(name, options)
    assert result.grid, "the grid is empty: the constraints would be tested on nothing"
    return result, pricer


def branches(result):
    for design in result.grid:
        for choice in design.segments:
            for b in choice.branches:
                yield design, choice, b


@pytest.mark.parametrize(("name", "options"), CASES, ids=IDS)
def test_at_most_20_designs_in_the_final_grid(name, options):
    result, _ = designs(name, options)
    assert 0 < len(result.grid) <= 20 == options.max_grid
    counts = [s["count"] for s in result.steps]
    assert counts == sorted(counts, reverse=True), "a step added designs"
    assert result.steps[-1]["step"] == "final grid" and counts[-1] == len(result.grid)
    assert counts[0] > 10**50  # the unconstrained space, as the paper says (> 10^50)


@pytest.mark.parametrize(("name", "options"), CASES, ids=IDS)
def test_meeting_points_are_stage_boundaries(name, options):
    result, _ = designs(name, options)
    boundaries = structure(name).boundaries
    for design in result.grid:
        segs = [c.segment for c in design.segments]
        assert segs[0].input == boundaries[0] and segs[-1].output == boundaries[-1]
        assert all(s.output in boundaries for s in segs)
        assert all(a.output == b.input for a, b in zip(segs, segs[1:], strict=False))


@pytest.mark.parametrize(("name", "options"), CASES, ids=IDS)
def test_at_least_n_meet_min_meeting_points(name, options):
    result, _ = designs(name, options)
    assert all(len(d.segments) >= options.min_meet for d in result.grid)


@pytest.mark.parametrize(("name", "options"), CASES, ids=IDS)
def test_ratio_floor_on_depth_and_width(name, options):
    result, _ = designs(name, options)
    for _, choice, b in branches(result):
        depth, width = b.option.realised(choice.segment)
        assert depth >= options.ratio_floor and width >= options.ratio_floor


@pytest.mark.parametrize(("name", "options"), CASES, ids=IDS)
def test_eq4_communication_at_most_alpha_times_the_segment(name, options):
    result, pricer = designs(name, options)
    for design in result.grid:
        for choice in design.segments:
            seg = choice.segment
            comm = 0.0
            for b in choice.branches:  # recomputed from the links and the tensors' sizes
                out_bytes = 4 * b.restore_channels * math.prod(seg.spatial)  # float32
                comm = max(comm, pricer.transfer_us(seg.input_bytes, pricer.home, b.unit)
                           + pricer.transfer_us(out_bytes, b.unit, pricer.home))  # fmt: skip
            assert comm == pytest.approx(choice.comm_us)
            assert comm <= options.alpha * min(seg.latency_us.values()) + 1e-9


def test_relaxed_designs_pay_communication_for_a_gpu_branch():
    result, _ = designs("mobilenet_v2", RELAXED)
    with_gpu = [d for d in result.grid if "gpu" in d.units]
    assert with_gpu and all(c.comm_us > 1000 for d in with_gpu for c in d.segments)


@pytest.mark.parametrize(("name", "options"), CASES, ids=IDS)
def test_scaling_direction_depth_on_accelerators_width_on_cpus(name, options):
    result, pricer = designs(name, options)
    for _, choice, b in branches(result):
        depth, width = b.option.realised(choice.segment)
        if pricer.kinds[b.unit] in ACCELERATORS:
            assert depth <= width + 1e-9
        else:
            assert width <= depth + 1e-9


@pytest.mark.parametrize(("name", "options"), CASES, ids=IDS)
def test_eq5_no_branch_slower_than_beta_times_the_original_segment(name, options):
    result, _ = designs(name, options)
    for _, choice, b in branches(result):
        assert b.latency_us <= options.beta * min(choice.segment.latency_us.values()) + 1e-9


@pytest.mark.parametrize(("name", "options"), CASES, ids=IDS)
def test_eq6_flops_shares_follow_throughput_shares(name, options):
    result, _ = designs(name, options)
    for design in result.grid:
        for choice in design.segments:
            seg = choice.segment
            theta = {b.unit: seg.flops / seg.latency_us[b.unit] for b in choice.branches}
            flops = sum(b.flops for b in choice.branches)
            for b in choice.branches:
                target = theta[b.unit] / sum(theta.values())
                assert abs((b.flops / flops) / target - 1) <= options.balance_tol + 1e-9


@pytest.mark.parametrize(("name", "options"), CASES, ids=IDS)
def test_capacity_branches_flops_close_to_the_original_segment(name, options):
    result, _ = designs(name, options)
    for design in result.grid:
        for choice in design.segments:
            total = sum(b.flops for b in choice.branches)
            assert abs(total / choice.segment.flops - 1) <= options.capacity_tol + 1e-9


@pytest.mark.parametrize(("name", "options"), CASES, ids=IDS)
def test_one_branch_per_processor_and_restored_channels(name, options):
    result, _ = designs(name, options)
    for design in result.grid:
        assert 2 <= len(design.units) <= options.max_branches
        for choice in design.segments:
            assert [b.unit for b in choice.branches] == list(design.units)
            assert sum(b.restore_channels for b in choice.branches) == choice.segment.width


def test_the_counts_name_each_constraint_in_order():
    result, _ = designs("mobilenet_v2", StretchOptions())
    assert [s["step"] for s in result.steps] == [
        "any layer", "stage boundaries", "whole blocks, eighths", "ratio floor",
        "meeting points >= N_meet_min", "Eq. 4: communication amortised", "scaling direction",
        "Eq. 5: straggler bound", "Eq. 6: work in proportion to throughput", "capacity kept",
        "final grid",
    ]  # fmt: skip
    kinds = {s["step"]: s["kind"] for s in result.steps}
    assert kinds["stage boundaries"] == kinds["ratio floor"] == "accuracy"
    assert kinds["Eq. 4: communication amortised"] == kinds["Eq. 5: straggler bound"] == "latency"


def test_a_constraint_nothing_satisfies_gives_the_step_that_emptied_the_space():
    from nnstretch_cases import prepared

    from engine.partition.nnstretch import plan_nnstretch
    from engine.targets import get_target

    p = prepared("mobilenet_v2")
    plan = plan_nnstretch(p.graph, p.model, get_target("phone-snapdragon835"),
                          StretchOptions(capacity_tol=1e-4))  # fmt: skip
    assert plan["valid"] is False
    assert "capacity kept" in plan["reason"]
    assert plan["candidate_counts"][-2]["count"] == 0


def test_eq5_other_reading_bounds_a_branch_by_the_original_on_its_own_processor():
    options = StretchOptions(beta=0.6, beta_reference="own")
    result, _ = designs("mobilenet_v2", options)
    for _, choice, b in branches(result):
        assert b.latency_us <= options.beta * choice.segment.latency_us[b.unit] + 1e-9


def test_at_the_papers_alpha_gpu_branches_cannot_amortise_their_transfers():
    from nnstretch_cases import phone_plan

    plan = phone_plan()
    # the phone preset leaves CPU-GPU links unknown: 1 ms per transfer is assumed (noted)
    assert any("1000 us per transfer" in n for n in plan["notes"])
    for combo in plan["combinations"]:
        if "gpu" in combo["units"]:
            assert combo["emptied_by"] == "Eq. 4: communication amortised"
        else:
            assert combo["designs_in_grid"] > 0
    assert "dsp" in plan["unusable"]  # int8-only: the model is fp32
