"""The shared schedule simulator and its validator, on a hand-computed diamond."""

from __future__ import annotations

import dataclasses

import pytest

from engine.partition import Link, Op, PartitionError, PartitionProblem, Tensor, simulate, validate
from engine.partition.simulator import critical_path

CPU, GPU = 0, 1


@pytest.fixture
def diamond() -> PartitionProblem:
    """input -> a -> (b, c) -> d -> output; a 10 us + 1 byte/ns link between cpu and gpu."""
    return PartitionProblem(
        ops=(Op("a", "Conv"), Op("b", "Conv"), Op("c", "Relu"), Op("d", "Add")),
        units=("cpu", "gpu"),
        latency_us=((5.0, 3.0), (10.0, 4.0), (8.0, None), (2.0, 2.0)),
        tensors=(
            Tensor("x", 1000, None, (0,)),
            Tensor("ta", 2000, 0, (1, 2)),
            Tensor("tb", 1000, 1, (3,)),
            Tensor("tc", 1000, 2, (3,)),
            Tensor("y", 500, 3, (), is_output=True),
        ),
        links=(Link("cpu", "gpu", 10.0, 1.0), Link("gpu", "cpu", 10.0, 1.0)),
    )


def test_times_transfers_and_makespan(diamond):
    s = simulate(diamond, (CPU, GPU, CPU, CPU), (0, 1, 2, 3))
    assert s.start_us == (0.0, 17.0, 5.0, 32.0)
    assert s.finish_us == (5.0, 21.0, 13.0, 34.0)
    # ta goes to the gpu (10 + 2000 B at 1 GB/s), tb comes back (10 + 1 us).
    assert [(t.tensor, t.start_us, t.finish_us) for t in s.transfers] == [
        (1, 5.0, 17.0),
        (2, 21.0, 32.0),
    ]
    assert s.makespan_us == 34.0
    assert s.unit_busy_us == (15.0, 4.0)
    assert validate(diamond, s) == []


def test_outputs_are_copied_home(diamond):
    s = simulate(diamond, (CPU, GPU, CPU, GPU), (0, 1, 2, 3))
    assert s.start_us[3] == 24.0  # tc arrives at 13 + 11
    assert s.makespan_us == 26.0 + 10.5  # y: 10 us + 500 B
    assert validate(diamond, s) == []


def test_a_tensor_moves_once_per_unit(diamond):
    s = simulate(diamond, (CPU, GPU, CPU, GPU), (0, 1, 2, 3))
    assert sum(1 for t in s.transfers if t.tensor == 1) == 1


def test_shared_memory_is_free(diamond):
    shared = dataclasses.replace(diamond, links=())
    s = simulate(shared, (CPU, GPU, CPU, CPU), (0, 1, 2, 3))
    assert s.transfers == () and s.makespan_us == 15.0  # b on gpu 5..9 beside c on cpu 5..13


def test_malformed_plans_are_refused(diamond):
    with pytest.raises(PartitionError, match="cannot run"):
        simulate(diamond, (CPU, CPU, GPU, CPU), (0, 1, 2, 3))
    with pytest.raises(PartitionError, match="before its input"):
        simulate(diamond, (CPU, CPU, CPU, CPU), (1, 0, 2, 3))
    with pytest.raises(PartitionError):
        simulate(diamond, (CPU, CPU, CPU), (0, 1, 2))


def test_validator_finds_each_violation(diamond):
    good = simulate(diamond, (CPU, GPU, CPU, CPU), (0, 1, 2, 3))

    def broken(**changes):
        return validate(diamond, dataclasses.replace(good, **changes))

    assert any(
        "overlap" in e
        for e in broken(start_us=(0.0, 17.0, 4.0, 32.0), finish_us=(5.0, 21.0, 12.0, 34.0))
    )
    assert any(
        "before its input" in e
        for e in broken(start_us=(0.0, 17.0, 5.0, 30.0), finish_us=(5.0, 21.0, 13.0, 32.0))
    )
    assert any("without a transfer" in e for e in broken(transfers=good.transfers[1:]))
    assert any("cannot run" in e for e in broken(placement=(CPU, GPU, GPU, CPU)))
    assert any("latency" in e for e in broken(finish_us=(5.0, 20.0, 13.0, 34.0)))
    assert any("after the makespan" in e for e in broken(makespan_us=30.0))
    short = dataclasses.replace(good.transfers[0], finish_us=16.0)
    assert any("shorter" in e for e in broken(transfers=(short, good.transfers[1])))


def test_critical_path_follows_the_transfer(diamond):
    s = simulate(diamond, (CPU, GPU, CPU, CPU), (0, 1, 2, 3))
    assert critical_path(s) == [0, 1, 3]


def test_problem_checks_its_input():
    with pytest.raises(PartitionError, match="no unit can run"):
        PartitionProblem((Op("a"),), ("cpu",), ((None,),))
    with pytest.raises(PartitionError, match="topological"):
        PartitionProblem((Op("a"), Op("b")), ("cpu",), ((1.0,), (1.0,)), (Tensor("t", 1, 1, (0,)),))
