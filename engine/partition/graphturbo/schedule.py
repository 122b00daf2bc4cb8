"""Where instance data lives, what moves off core, and the predicted time (GraphTurbo,
OSDI '23, sections 4.3 and 4.4, and the ablation of Fig. 15).

The replay walks an instance order. With outputs kept in the local buffer, a slice stays
there until its last consumer ran; when the kept slices and the running instance's peak
overflow the local buffer, the slice with the longest lifetime (definition to last use
in the order) is spilled to the global buffer first, and from there to DRAM the same
way (section 4.3; prior work spills the largest). With outputs in the global buffer
only, every slice goes out and comes back. Weights go DRAM -> global buffer once per
subgraph and global -> local once per instance.

Buffers are pooled per level across the chip (every core's local buffer, every
cluster's global buffer): traffic between clusters is not modelled. Time is a roofline
per instance on the cores it is bound to, instances of a subgraph spread over the
clusters; cross-layer prefetch (section 4.4) hides an instance's weight load behind the
previous instance's compute. Every number from it is predicted, by ``MODEL``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.partition.graphturbo.instances import InstanceGraph

MODEL = "graphturbo-roofline-v1"


@dataclass(frozen=True)
class Chip:
    """The DSA's numbers the replay needs (from the target's unit)."""

    cores: int
    clusters: int
    local_bytes: int
    global_bytes: int
    peak_gflops: float
    global_bw_gbps: float
    dram_bw_gbps: float
    launch_us: float

    @property
    def local_total(self) -> int:
        return self.local_bytes * self.cores

    @property
    def global_total(self) -> int:
        return self.global_bytes * self.clusters


@dataclass
class Replay:
    """Off-core bytes by level pair, local-buffer use and the predicted time of one order."""

    local_global_bytes: int = 0
    global_dram_bytes: int = 0
    from_local_bytes: int = 0
    consumed_bytes: int = 0
    spills: int = 0
    occupancy: list[int] = field(default_factory=list)
    latency_us: float = 0.0

    @property
    def offcore_bytes(self) -> int:
        return self.local_global_bytes + self.global_dram_bytes

    @property
    def local_hit(self) -> float:
        """Share of the bytes instances read from other instances found in the local buffer."""
        return self.from_local_bytes / self.consumed_bytes if self.consumed_bytes else 1.0

    def to_dict(self, chip: Chip) -> dict:
        mean = sum(self.occupancy) / len(self.occupancy) if self.occupancy else 0.0
        return {
            "local_global_bytes": self.local_global_bytes,
            "global_dram_bytes": self.global_dram_bytes,
            "offcore_bytes": self.offcore_bytes,
            "local_hit": round(self.local_hit, 4),
            "local_utilisation": round(mean / chip.local_total, 4),
            "spills": self.spills,
            "latency_ms": round(self.latency_us / 1e3, 6),
        }


def replay(
    graph: InstanceGraph,
    order: list[int],
    chip: Chip,
    *,
    keep_local: bool,
    prefetch: bool,
    trace: list | None = None,
) -> Replay:
    """Replay ``order`` (see the module docstring); ``trace``, when given, receives one
    entry per step: the instance, its times and bytes, the local buffer in use."""
    insts = graph.instances
    position = {x: k for k, x in enumerate(order)}
    consumers = graph.consumers()
    last_use = {x: max((position[y] for y in consumers[x]), default=len(order)) for x in order}
    span = {x: last_use[x] - position[x] for x in order}
    local: dict[int, int] = {}
    glob: dict[int, int] = {}
    dram: set[int] = set()
    r = Replay()
    loaded_groups: set[int] = set()
    previous_compute_us = 0.0
    groups = {}
    for inst in insts:
        groups[inst.group] = groups.get(inst.group, 0) + 1

    def to_global(x: int, spill: bool = True) -> None:
        size = local.pop(x)
        r.local_global_bytes += size
        r.spills += spill
        glob[x] = size
        while sum(glob.values()) > chip.global_total:
            y = max(glob, key=lambda k: (span[k], k))
            r.global_dram_bytes += glob.pop(y)
            dram.add(y)

    for step, x in enumerate(order):
        inst = insts[x]
        before = (r.local_global_bytes, r.global_dram_bytes)
        lg = gd = 0
        for p, nbytes in inst.inputs.items():
            r.consumed_bytes += nbytes
            if p in local:
                r.from_local_bytes += nbytes
            elif p in glob:
                lg += nbytes
            else:
                lg += nbytes
                gd += nbytes
        lg += inst.graph_input_bytes
        gd += inst.graph_input_bytes
        weights_from_dram = 0 if inst.group in loaded_groups else inst.weight_bytes
        loaded_groups.add(inst.group)
        working = inst.core_peak_bytes * _product(inst.binding)
        while local and sum(local.values()) + working > chip.local_total:
            to_global(max(local, key=lambda k: (span[k], k)))
        r.occupancy.append(min(chip.local_total, sum(local.values()) + working))
        local[x] = inst.out_bytes
        if not keep_local or inst.graph_output:
            to_global(x, spill=False)
            if inst.graph_output:
                gd += inst.out_bytes
        for p in list(inst.inputs):
            if last_use.get(p) == step:
                local.pop(p, None)
                glob.pop(p, None)
        r.local_global_bytes += lg + inst.weight_bytes
        r.global_dram_bytes += gd + weights_from_dram
        share = min(groups[inst.group], chip.clusters)
        cores = _product(inst.binding)
        compute_us = inst.flops / (chip.peak_gflops * 1e3 * cores / chip.cores)
        weight_us = inst.weight_bytes / (chip.global_bw_gbps * 1e3)
        weight_us += weights_from_dram / (chip.dram_bw_gbps * 1e3)
        lg = r.local_global_bytes - before[0] - inst.weight_bytes  # with this step's spills
        gd = r.global_dram_bytes - before[1] - weights_from_dram
        moved_us = lg / (chip.global_bw_gbps * 1e3) + gd / (chip.dram_bw_gbps * 1e3)
        exposed = max(0.0, weight_us - previous_compute_us) if prefetch else weight_us
        r.latency_us += (chip.launch_us + compute_us + moved_us + exposed) / share
        if trace is not None:
            trace.append(
                {
                    "instance": x,
                    "launch_us": chip.launch_us,
                    "compute_us": compute_us,
                    "moved_us": moved_us,
                    "weight_us": weight_us,
                    "exposed_weight_us": exposed,
                    "local_global_bytes": lg + inst.weight_bytes,
                    "global_dram_bytes": gd + weights_from_dram,
                    "occupancy_bytes": r.occupancy[-1],
                    "cores": cores,
                }
            )
        previous_compute_us = compute_us
    return r


def per_layer(view, chip: Chip) -> Replay:
    """The baseline: one kernel per layer (chain) on every core, its inputs, output and
    weights through the global buffer from and to DRAM, as a layer-bounded compiler emits
    (the paper's Table 3: TVM almost always writes to DRAM)."""
    r = Replay()
    layers: dict[int, list[int]] = {}
    for i in range(view.n):
        layers.setdefault(view.layer[i], []).append(i)
    for members in layers.values():
        inside = set(members)
        ins = {t for i in members for t in view.reads[i] if view.producer.get(t) not in inside}
        outs = {
            t for i in members for t in view.writes[i]
            if t in view.graph.outputs
            or any(c not in inside for c in view.consumers.get(t, []))
        }  # fmt: skip
        nbytes = sum(view.tensor_bytes[t] for t in ins | outs)
        nbytes += sum(view.weight_bytes[i] for i in members)
        r.local_global_bytes += nbytes
        r.global_dram_bytes += nbytes
        flops = sum(view.flops[i] for i in members)
        r.latency_us += (
            chip.launch_us
            + flops / (chip.peak_gflops * 1e3)
            + nbytes / (chip.global_bw_gbps * 1e3)
            + nbytes / (chip.dram_bw_gbps * 1e3)
        )
    return r


def _product(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out
