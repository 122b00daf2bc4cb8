"""The cost model: how long an op takes on a unit, a tensor between units, a network upload.

Op latency is the roofline estimate (Williams et al.; ARCHITECTURE section 6) corrected by
a per-op-type efficiency, the fraction of the roofline the op type reaches on that unit::

    latency_us = launch_us + max(flops / peak, bytes / bandwidth) / efficiency[op_type]

Shape-only ops (:data:`VIEW_OPS`: Reshape, Flatten, ...) move no data: they cost the launch.
Where one op type hides kernels of very different efficiency (a depthwise against a dense
convolution), a variant key such as ``Conv/depthwise`` takes precedence (:func:`op_variant`).

Energy follows DNNTune (thesis eq. 3-1, L786-788): ``E = T x (P_active - P_idle)``; a network
upload follows thesis eq. 3-1/3-2: ``T = RTT + bytes / bandwidth``, ``E = radio_w x T``.

An unknown number never becomes a guess: an estimate that needs it is ``None`` with the
reason. Two numbers are treated as their ideal instead, and the estimate says so: an
unknown launch overhead counts as 0 and an op type without a fitted factor runs on the roof
(efficiency 1), so an uncalibrated prediction is a lower bound on latency.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.graph.costs import OpCost
from engine.graph.ir import Graph, Node
from engine.targets.schema import DEFAULT_EFFICIENCY_KEY, Link, TargetProfile, Unit

MODEL_NAME = "roofline+efficiency v1"

VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"})
"""Ops that runtimes execute as a view of their input (no data moves): only the launch."""

_DTYPES = {
    "float32": "fp32",
    "float64": "fp64",
    "float16": "fp16",
    "bfloat16": "bf16",
    "int8": "int8",
    "uint8": "int8",
    "int4": "int4",
    "uint4": "int4",
}


def op_variant(node: Node, graph: Graph) -> str | None:
    """A finer efficiency key than the op type, where kernels of one type differ widely:
    ``Conv/depthwise``, ``Conv/grouped``, ``Conv/1x1``, ``Conv/dense``, ``Gemm/gemv``."""
    if node.op_type == "Conv" and len(node.inputs) > 1:
        weight = graph.tensors[node.inputs[1]].static_shape
        if weight is None:
            return None
        group = int(node.attributes.get("group", 1))
        if group > 1:
            return "Conv/depthwise" if weight[1] == 1 else "Conv/grouped"
        return "Conv/1x1" if all(k == 1 for k in weight[2:]) else "Conv/dense"
    if node.op_type in ("Gemm", "MatMul") and node.outputs:
        out = graph.tensors[node.outputs[0]].static_shape
        if out is not None and len(out) >= 2 and out[-2] == 1:
            return f"{node.op_type}/gemv"  # one row: matrix-vector, bound by the weights
    return None


LOGIC_DTYPES = frozenset({"bool", "int64", "int32"})
"""Dtypes of masks and index arithmetic, priced by their memory traffic on a general-purpose
unit when its profile gives no peak for them."""
GENERAL_PURPOSE = frozenset({"cpu", "gpu"})


def unit_dtype(tensor_dtype: str) -> str:
    """The ``peak_gflops`` key for a tensor dtype name (``float32`` -> ``fp32``)."""
    return _DTYPES.get(tensor_dtype, tensor_dtype)


@dataclass(frozen=True)
class OpEstimate:
    """One op on one unit. ``status``: ok, unsupported, unknown (a number is missing) or
    not_costed (the graph analysis could not count the op's work)."""

    latency_us: float | None
    status: str
    bound: str | None = None  # compute | memory | launch
    reason: str | None = None
    calibrated: bool = False

    def to_dict(self) -> dict:
        return {
            "latency_us": self.latency_us,
            "status": self.status,
            "bound": self.bound,
            "reason": self.reason,
            "calibrated": self.calibrated,
        }


class CostModel:
    """Latency, transfer and energy estimates for one :class:`TargetProfile`."""

    name = MODEL_NAME

    def __init__(self, profile: TargetProfile):
        self.profile = profile
        self._units = {u.name: u for u in profile.units}

    def unit(self, name: str) -> Unit:
        found = self._units.get(name)
        return found if found is not None else self.profile.unit(name)  # raises

    def estimate(
        self,
        cost: OpCost | None,
        op_type: str,
        unit: str,
        dtype: str = "fp32",
        variant: str | None = None,
    ) -> OpEstimate:
        """The latency of an op with work ``cost`` and type ``op_type`` on ``unit``; the
        efficiency factor is the one of ``variant`` (see :func:`op_variant`) if the unit has
        one, else of ``op_type``, else the unit's default."""
        u = self.unit(unit)
        if not u.supports_op(op_type):
            return OpEstimate(None, "unsupported", reason=f"{u.name} does not run {op_type}")
        if cost is None:
            return OpEstimate(None, "not_costed", reason="the op's work is not known")
        compute_us = memory_us = 0.0
        if cost.flops and dtype in LOGIC_DTYPES and dtype not in u.peak_gflops:
            # Masks and index arithmetic (And, Where's condition, int64 shape math): a
            # general-purpose unit computes them at the speed it moves them; an accelerator
            # that lists no such dtype does not run them.
            if u.kind not in GENERAL_PURPOSE:
                return OpEstimate(
                    None, "unsupported", reason=f"{u.name} does not compute in {dtype}"
                )
        elif cost.flops:
            if dtype not in u.peak_gflops:
                return OpEstimate(
                    None, "unsupported", reason=f"{u.name} does not compute in {dtype}"
                )
            peak = u.peak_gflops[dtype]
            if peak is None:
                return OpEstimate(None, "unknown", reason=f"{dtype} peak of {u.name} unknown")
            compute_us = cost.flops / (peak * 1e3)
        moved = 0 if op_type in VIEW_OPS else cost.bytes_read + cost.bytes_written
        if moved:
            if u.mem_bw_gbps is None:
                return OpEstimate(None, "unknown", reason=f"memory bandwidth of {u.name} unknown")
            memory_us = moved / (u.mem_bw_gbps * 1e3)
        factor = next(
            (
                u.efficiency[k]
                for k in (variant, op_type, DEFAULT_EFFICIENCY_KEY)
                if k in u.efficiency
            ),
            None,
        )
        roof_us = max(compute_us, memory_us)
        bound = "launch" if roof_us == 0 else ("compute" if compute_us >= memory_us else "memory")
        latency = (u.launch_us or 0.0) + roof_us / (factor or 1.0)
        return OpEstimate(latency, "ok", bound, calibrated=factor is not None)

    def op_latency_us(
        self,
        cost: OpCost | None,
        op_type: str,
        unit: str,
        dtype: str = "fp32",
        variant: str | None = None,
    ) -> float | None:
        """Predicted latency in microseconds, ``None`` if unsupported or a number is unknown."""
        return self.estimate(cost, op_type, unit, dtype, variant).latency_us

    def transfer_us(self, nbytes: int, src: str, dst: str) -> float | None:
        """Time to move ``nbytes`` from unit ``src`` to ``dst``; ``None`` when not known."""
        for name in (src, dst):
            self.unit(name)  # an unknown name raises
        if src == dst:
            return 0.0
        link = self._link(src, dst)
        if link is None:
            return None
        if link.zero_copy:
            return 0.0
        if link.latency_us is None or (nbytes and link.gbps is None):
            return None
        return link.latency_us + (nbytes / (link.gbps * 1e3) if nbytes else 0.0)

    def energy_j(self, latency_us: float | None, unit: str) -> float | None:
        """Energy of running ``latency_us`` on ``unit``: T x (P_active - P_idle)."""
        self.unit(unit)
        power = self.profile.power.get(unit)
        if latency_us is None or power is None or power.active_w is None or power.idle_w is None:
            return None
        return latency_us * 1e-6 * (power.active_w - power.idle_w)

    def network_transfer(
        self, nbytes: int, network: str, direction: str = "up"
    ) -> tuple[float | None, float | None]:
        """``(seconds, joules)`` to send ``nbytes`` over a network (``up`` or ``down``)."""
        net = self.profile.network(network)
        mbps = net.up_mbps if direction == "up" else net.down_mbps
        if net.rtt_ms is None or mbps is None:
            return None, None
        seconds = net.rtt_ms / 1e3 + nbytes * 8 / (mbps * 1e6)
        return seconds, network_energy_j(seconds, net.radio_w)

    def _link(self, src: str, dst: str) -> Link | None:
        reverse = None
        for link in self.profile.links:
            if link.src == src and link.dst == dst:
                return link
            if link.bidirectional and link.src == dst and link.dst == src:
                reverse = link
        return reverse


def network_energy_j(seconds: float | None, radio_w: float | None) -> float | None:
    """Radio energy of a transfer (thesis eq. 3-2): E = w x T."""
    if seconds is None or radio_w is None:
        return None
    return radio_w * seconds


def op_dtype(node: Node, graph: Graph) -> str:
    """The ``peak_gflops`` key an op computes in: its output's dtype, except for a boolean
    result (a comparison, IsNaN), which is computed in its first input's dtype."""
    dtypes = [graph.tensors[o].dtype for o in node.outputs if o] or ["?"]
    if dtypes[0] == "bool":
        dtypes = [graph.tensors[i].dtype for i in node.inputs if i] or dtypes
    return unit_dtype(dtypes[0])
