"""Synthetic partitioning problems for tests and benchmarks: random DAGs, Inception-style
multi-branch graphs and chains, on units that differ in speed per kind of op.

Latencies follow a small roofline-like recipe: an op has a work size and a kind; each unit
has a speed per kind and a launch overhead. The first unit is a CPU that runs everything;
other units may leave some op kinds unsupported, as GPUs and DSPs do.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from engine.partition.problem import Link, Op, PartitionProblem, Tensor


@dataclass(frozen=True)
class SyntheticUnit:
    """Speed in work units per microsecond by op kind (missing kind = unsupported)."""

    name: str
    speed: dict[str, float]
    launch_us: float


DEFAULT_UNITS = (
    SyntheticUnit("cpu", {"Conv": 1.0, "MaxPool": 1.0, "Relu": 1.0, "Concat": 1.0}, 2.0),
    SyntheticUnit("gpu", {"Conv": 4.0, "MaxPool": 2.0, "Relu": 2.0, "Concat": 2.0}, 20.0),
    SyntheticUnit("dsp", {"Conv": 2.5, "MaxPool": 1.5, "Relu": 1.5}, 10.0),
)


def _units(units: int | Sequence[str | SyntheticUnit]) -> list[SyntheticUnit]:
    if isinstance(units, int):
        if not 1 <= units <= len(DEFAULT_UNITS):
            raise ValueError(f"between 1 and {len(DEFAULT_UNITS)} default units")
        return list(DEFAULT_UNITS[:units])
    found = []
    for k, unit in enumerate(units):
        if isinstance(unit, SyntheticUnit):
            found.append(unit)
        else:
            template = DEFAULT_UNITS[min(k, len(DEFAULT_UNITS) - 1)]
            found.append(SyntheticUnit(unit, template.speed, template.launch_us))
    return found


def _links(units: list[SyntheticUnit], latency_us: float, gbps: float) -> tuple[Link, ...]:
    # The first unit is the host CPU; every other unit has its own memory.
    return tuple(
        Link(a.name, b.name, latency_us, gbps)
        for a in units
        for b in units
        if a is not b and (a is not units[0] or b is not units[0])
    )


def _problem(
    ops: list[tuple[str, str, float]],
    preds: list[list[int]],
    out_bytes: list[int],
    input_bytes: int,
    units: list[SyntheticUnit],
    link_latency_us: float,
    link_gbps: float,
) -> PartitionProblem:
    latency = tuple(
        tuple((work / u.speed[kind] + u.launch_us) if kind in u.speed else None for u in units)
        for _, kind, work in ops
    )
    consumers: list[list[int]] = [[] for _ in ops]
    roots = []
    for i, ps in enumerate(preds):
        for p in ps:
            consumers[p].append(i)
        if not ps:
            roots.append(i)
    tensors = [Tensor("input", input_bytes, None, tuple(roots))]
    tensors += [
        Tensor(f"{name}:0", out_bytes[i], i, tuple(consumers[i]), not consumers[i])
        for i, (name, _, _) in enumerate(ops)
    ]
    return PartitionProblem(
        ops=tuple(Op(name, kind) for name, kind, _ in ops),
        units=tuple(u.name for u in units),
        latency_us=latency,
        tensors=tuple(tensors),
        links=_links(units, link_latency_us, link_gbps),
    )


def random_dag(
    n: int,
    units: int | Sequence[str | SyntheticUnit] = 2,
    seed: int = 0,
    *,
    window: int = 6,
    link_latency_us: float = 20.0,
    link_gbps: float = 4.0,
) -> PartitionProblem:
    """A random DAG of ``n`` ops; each reads 1-3 of the ``window`` ops before it."""
    rng = random.Random(seed)
    specs = _units(units)
    kinds = ["Conv", "Conv", "MaxPool", "Relu", "Concat"]
    ops, preds, out_bytes = [], [], []
    for i in range(n):
        kind = rng.choice(kinds)
        work = rng.uniform(40, 400) if kind == "Conv" else rng.uniform(5, 60)
        ops.append((f"op{i}", kind, work))
        lo = max(0, i - window)
        k = min(i - lo, rng.choice([1, 1, 2, 3]))
        preds.append(sorted(rng.sample(range(lo, i), k)) if i else [])
        out_bytes.append(rng.randint(8_000, 400_000))
    return _problem(ops, preds, out_bytes, 150_528, specs, link_latency_us, link_gbps)


def inception_dag(
    modules: int = 3,
    units: int | Sequence[str | SyntheticUnit] = 2,
    *,
    link_latency_us: float = 20.0,
    link_gbps: float = 4.0,
) -> PartitionProblem:
    """A stem, ``modules`` Inception blocks (four branches joined by a concat), a head."""
    ops: list[tuple[str, str, float]] = []
    preds: list[list[int]] = []
    out_bytes: list[int] = []

    def add(name: str, kind: str, work: float, ps: list[int], nbytes: int) -> int:
        ops.append((name, kind, work))
        preds.append(ps)
        out_bytes.append(nbytes)
        return len(ops) - 1

    last = add("stem_conv", "Conv", 600, [], 800_000)
    last = add("stem_pool", "MaxPool", 60, [last], 200_000)
    for m in range(modules):
        b1 = add(f"m{m}_1x1", "Conv", 120, [last], 50_000)
        r3 = add(f"m{m}_3x3_reduce", "Conv", 60, [last], 30_000)
        b3 = add(f"m{m}_3x3", "Conv", 360, [r3], 60_000)
        r5 = add(f"m{m}_5x5_reduce", "Conv", 30, [last], 10_000)
        b5 = add(f"m{m}_5x5", "Conv", 200, [r5], 20_000)
        pool = add(f"m{m}_pool", "MaxPool", 40, [last], 200_000)
        bp = add(f"m{m}_pool_proj", "Conv", 60, [pool], 20_000)
        last = add(f"m{m}_concat", "Concat", 20, [b1, b3, b5, bp], 150_000)
    last = add("head_pool", "MaxPool", 30, [last], 4_000)
    add("head_fc", "Conv", 80, [last], 4_000)
    return _problem(ops, preds, out_bytes, 150_528, _units(units), link_latency_us, link_gbps)


def chain_dag(
    n: int,
    units: int | Sequence[str | SyntheticUnit] = 2,
    seed: int = 0,
    *,
    link_latency_us: float = 20.0,
    link_gbps: float = 4.0,
) -> PartitionProblem:
    """A chain of ``n`` ops (conv, elementwise, pool repeating): no parallelism to exploit."""
    rng = random.Random(seed)
    ops, preds, out_bytes = [], [], []
    for i in range(n):
        kind = ("Conv", "Relu", "MaxPool")[i % 3]
        ops.append((f"op{i}", kind, rng.uniform(100, 300) if kind == "Conv" else 20.0))
        preds.append([i - 1] if i else [])
        out_bytes.append(rng.randint(100_000, 600_000))
    return _problem(ops, preds, out_bytes, 150_528, _units(units), link_latency_us, link_gbps)
