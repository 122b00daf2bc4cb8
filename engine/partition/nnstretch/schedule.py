"""The spatial schedule of a branched model in the shared simulator
(:mod:`engine.partition.simulator`), as NN-Stretch's subgraph scheduler runs it (section 5).

Each branch is one subgraph on its processor; head, meeting points (the concats) and tail
run on the home processor, unparallelised. The simulator starts every op as soon as its
inputs are there: a branch starts when the segment's input reaches its processor (a
transfer on the link's lane, the communication lane), the concat waits for every branch
(the barrier at the meeting point), and the next segment's branches wait for the concat.
The schedule goes through the simulator's validator like every partition plan.
"""

from __future__ import annotations

from engine.partition.baselines import single_unit_makespans
from engine.partition.nnstretch.branch import Branched
from engine.partition.nnstretch.pricing import Pricer
from engine.partition.simulator import checked_schedule


def simulate_branched(branched: Branched, pricer: Pricer) -> dict:
    """Replay ``branched`` (its nodes on their units) and describe the schedule: makespan,
    ops, transfers, barriers, and the time in head, tail and communication."""
    graph = branched.to_ir()
    problem = pricer.problem(graph)
    spec_of = {s.name: s for s in branched.nodes}
    placement = tuple(problem.unit_index[spec_of[op.name].unit] for op in problem.ops)
    schedule = checked_schedule(problem, placement, range(problem.n), "nn-stretch")
    ops = []
    for i, op in enumerate(problem.ops):
        spec = spec_of[op.name]
        ops.append(
            {
                "op": op.name,
                "op_type": op.op_type,
                "unit": problem.units[placement[i]],
                "role": spec.role,
                "segment": spec.segment,
                "branch": spec.branch,
                "start_us": round(schedule.start_us[i], 3),
                "finish_us": round(schedule.finish_us[i], 3),
            }
        )
    transfers = [
        {
            "tensor": problem.tensors[t.tensor].name,
            "link": f"{problem.units[t.src_unit]}->{problem.units[t.dst_unit]}",
            "bytes": t.bytes,
            "start_us": round(t.start_us, 3),
            "finish_us": round(t.finish_us, 3),
        }
        for t in schedule.transfers
    ]
    barriers = [
        {"segment": o["segment"], "at_us": o["start_us"], "op": o["op"]}
        for o in ops
        if o["role"] == "meet"
    ]
    head = [o for o in ops if o["role"] == "head"]
    tail = [o for o in ops if o["role"] == "tail"]
    head_us = max((o["finish_us"] for o in head), default=0.0)
    tail_us = schedule.makespan_us - min(
        (o["start_us"] for o in tail), default=schedule.makespan_us
    )
    comm_us = sum(t["finish_us"] - t["start_us"] for t in transfers)
    makespan = schedule.makespan_us
    busy = {problem.units[u]: round(b / 1e3, 6) for u, b in enumerate(schedule.unit_busy_us)}
    return {
        "makespan_ms": round(makespan / 1e3, 6),
        "head_ms": round(head_us / 1e3, 6),
        "tail_ms": round(tail_us / 1e3, 6),
        "head_tail_share": round((head_us + tail_us) / makespan, 4) if makespan else None,
        "comm_ms": round(comm_us / 1e3, 6),
        "comm_share": round(_critical_comm(ops, transfers, barriers) / makespan, 4)
        if makespan
        else None,
        "unit_busy_ms": busy,
        "ops": ops,
        "transfers": transfers,
        "barriers": barriers,
        "units": list(problem.units),
        "notes": list(problem.notes),
    }


def _critical_comm(ops, transfers, barriers) -> float:
    """Communication on the way to each barrier: for the branch that arrives last, the time
    its input and output spent on a link."""
    total = 0.0
    for barrier in barriers:
        seg = barrier["segment"]
        members = [o for o in ops if o["segment"] == seg and o["role"] in ("branch", "restore")]
        if not members:
            continue
        last = max(members, key=lambda o: o["finish_us"])
        unit = last["unit"]
        for t in transfers:
            if t["link"].endswith(f"->{unit}") or t["link"].startswith(f"{unit}->"):
                lo = min(o["start_us"] for o in members)
                if lo - 1e-6 <= t["finish_us"] and t["start_us"] <= barrier["at_us"] + 1e-6:
                    total += t["finish_us"] - t["start_us"]
    return total


def single_units(graph, pricer: Pricer) -> dict[str, float]:
    """The original model on each processor alone (simulated, ms), the baseline of the
    predicted speedup."""
    problem = pricer.problem(graph)
    return {u: v / 1e3 for u, v in single_unit_makespans(problem).items()}
