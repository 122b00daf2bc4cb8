"""TVM's own memory plan of a model's build, and ours on the very same tensors.

TVM plans the intermediate tensors of a Relax function with ``StaticPlanBlockMemory``:
after FuseOps/FuseTIR every kernel writes one tensor, reshapes are views of their input,
and each tensor gets a *storage token* that later tensors of a fitting size may reuse
(a shared-objects plan). The total of the ``alloc_storage`` sizes it emits is what the
build allocates for activations; graph inputs, weights and the outputs it returns are
allocated apart, as our planners do by default.

:func:`tvm_memory` runs TVM's pipeline up to that pass on the same simplified model the
compile stage builds (TVM's FuseOps, weights pre-transformed), reads the total back,
and turns the kernel-level Relax function into an :class:`engine.graph.ir.Graph` (one
node per kernel, views folded into their source) so :func:`engine.memory.plan_memory` can plan
exactly the tensors TVM planned, in TVM's execution order. Nodes TVM cannot import run
in onnxruntime in the build; their tensors are in neither figure (both sides say so).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import onnx

from engine.errors import ProgressFn
from engine.graph.ir import Graph, Node, Tensor
from engine.graph.tensors import static_shape, tensor_bytes
from engine.memory.plan import MemoryConfig, plan_memory

KERNEL_DOMAIN = "tvm"
"""Domain of kernel nodes in the kernel graph: never written in place (TVM does not)."""


@dataclass
class TvmMemory:
    """TVM's static allocation of a build, and the kernel graphs its segments run."""

    static_bytes: int  # sum of alloc_storage sizes over every TVM segment
    storages: int  # how many storage tokens TVM allocated
    planned_tensors: int  # tensors placed in those storages
    unplanned: list[str] = field(default_factory=list)  # allocated at run time (outputs, dynamic)
    fallback_nodes: int = 0  # ONNX nodes run by onnxruntime (in neither figure)
    kernels: int = 0
    graphs: list[Graph] = field(default_factory=list, repr=False)
    time_s: float = 0.0

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("graphs")
        return data


def tvm_memory(
    source,
    input_shapes: dict[str, tuple[int, ...]] | None = None,
    target: str = "host",
    progress: ProgressFn | None = None,
) -> TvmMemory:
    """Import ``source`` as the compile stage does and read TVM's static memory plan.

    Raises :class:`engine.errors.EngineError` subclasses for bad models and shapes, as
    :func:`engine.fusion.compile_model` does.
    """
    from engine.fusion import delegate
    from engine.fusion.build import fuse_segment
    from engine.fusion.importer import import_onnx, prepare, simplify
    from engine.fusion.lowering import fuse_tir
    from engine.fusion.preparation import dtypes, find_fallback, full_shapes
    from engine.fusion.target import resolve_target
    from engine.graph.loader import load_model, model_inputs
    from engine.graph.shapes import apply_input_shapes
    from engine.graph.topology import sorted_model

    report = progress or (lambda fraction, message: None)
    started = time.perf_counter()
    spec = resolve_target(target, 1)
    model, _ = sorted_model(load_model(source))
    apply_input_shapes(model, full_shapes(model, dict(input_shapes or {}), model_inputs))
    model, _ = simplify(model)
    model = onnx.shape_inference.infer_shapes(prepare(model))
    report(0.2, "TVM import")
    fallback = find_fallback(model, report)
    node_order = [n.name for n in model.graph.node]
    result = TvmMemory(0, 0, 0, fallback_nodes=len(fallback))
    segments = [s for s in delegate.partition(model, set(fallback)) if s.backend == delegate.TVM]
    for k, segment in enumerate(segments):
        report(0.3 + 0.7 * k / len(segments), f"TVM memory plan of segment {segment.index}")
        imported = import_onnx(segment.model, {}, dtypes(segment.model))
        fused = fuse_tir(
            fuse_segment(imported, spec.tvm_target(), node_order).fused, spec.tvm_target()
        )
        lowered = _lower_dataflow(fused, spec.tvm_target())
        planned = _plan_block_memory(lowered, spec.tvm_target())
        storages, tensors, unplanned = _static_allocations(planned["main"])
        result.static_bytes += sum(storages)
        result.storages += len(storages)
        result.planned_tensors += tensors
        result.unplanned += unplanned
        graph = kernel_graph(lowered["main"])
        result.kernels += sum(1 for n in graph.nodes if n.domain == KERNEL_DOMAIN)
        result.graphs.append(graph)
    result.time_s = round(time.perf_counter() - started, 3)
    report(1.0, f"TVM allocates {result.static_bytes} bytes in {result.storages} storages")
    return result


def _lower_dataflow(mod, target):
    """TVM's CPU pipeline up to (not including) CallTIRRewrite: views made explicit."""
    import tvm
    from tvm import relax

    with target:
        return tvm.transform.Sequential(
            [relax.transform.RewriteDataflowReshape(), relax.transform.ToNonDataflow()]
        )(mod)


def _plan_block_memory(mod, target):
    import tvm
    from tvm import relax

    with target:
        return tvm.transform.Sequential(
            [
                relax.transform.RemovePurityChecking(),
                relax.transform.CallTIRRewrite(),
                relax.transform.StaticPlanBlockMemory(),
            ]
        )(mod)


def _static_allocations(main) -> tuple[list[int], int, list[str]]:
    """Sizes of the ``alloc_storage`` calls, the tensors placed in them, and any
    allocation whose size is not a constant (reported, not counted)."""
    import tvm
    from tvm import relax, tirx

    storages, unplanned, tensors = [], [], [0]

    def visit(expr):
        if not isinstance(expr, relax.Call) or not isinstance(expr.op, tvm.ir.Op):
            return
        name = expr.op.name
        if name == "relax.memory.alloc_storage":
            size = expr.args[0]
            values = list(size.values) if isinstance(size, relax.ShapeExpr) else []
            if len(values) == 1 and isinstance(values[0], tirx.IntImm):
                storages.append(int(values[0]))
            else:
                unplanned.append(f"storage of size {size}")
        elif name == "relax.memory.alloc_tensor":
            tensors[0] += 1
        elif name == "relax.builtin.alloc_tensor":
            unplanned.append(f"tensor {expr.args[0]} allocated at run time")

    relax.analysis.post_order_visit(main, visit)
    return storages, tensors[0], unplanned


def kernel_graph(main) -> Graph:
    """The kernel-level graph of a lowered Relax ``main``: one node per ``call_tir``
    (domain ``tvm``, never in place); a view (reshape) is its source tensor under another
    name, so its readers keep the source alive, as TVM's planner does. Tensors are sized
    from their types; parameters after ``num_input`` are weights."""
    from tvm import relax

    num_input = int(main.attrs["num_input"]) if main.attrs and "num_input" in main.attrs else None
    params = list(main.params)
    if num_input is None:
        num_input = len(params)
    tensors: dict[str, Tensor] = {}
    alias: dict[str, list[str]] = {}  # tuple-valued var -> its tensors
    for k, p in enumerate(params):
        tensors[p.name] = _tensor(p.name, p.ty, is_param=k >= num_input)
    inputs = [p.name for p in params[:num_input]]
    nodes: list[Node] = []

    def names_of(expr) -> list[str]:
        if isinstance(expr, relax.Var):
            return alias.get(expr.name, [expr.name])
        if isinstance(expr, relax.Tuple):
            return [n for f in expr.fields for n in names_of(f)]
        return []

    body = main.body
    for block in body.blocks:
        for binding in block.bindings:
            var, value = binding.var, binding.value
            name = var.name
            if isinstance(value, relax.TupleGetItem):
                alias[name] = [names_of(value.tuple_value)[value.index]]
                continue
            if isinstance(value, (relax.Var, relax.Tuple)):
                alias[name] = names_of(value)
                continue
            if not isinstance(value, relax.Call):
                continue
            op = getattr(value.op, "name", "")
            if op == "relax.call_tir":
                kernel, args = value.args[0].name_hint, names_of(value.args[1])
                op_type, domain = kernel, KERNEL_DOMAIN
            elif op == "relax.reshape":  # a view: the same bytes as its source, as in TVM
                alias[name] = names_of(value.args[0])
                continue
            else:
                args = [n for a in value.args for n in names_of(a)]
                op_type, domain = op or "call", KERNEL_DOMAIN
            fields = var.ty.fields if isinstance(var.ty, relax.TupleType) else None
            outputs = [f"{name}.{i}" for i in range(len(fields))] if fields else [name]
            for out, info in zip(outputs, fields or [var.ty], strict=True):
                tensors[out] = _tensor(out, info, producer=name)
            if fields:
                alias[name] = outputs
            for a in args:
                if a in tensors:
                    tensors[a].consumers.append(name)
            nodes.append(Node(name, op_type, domain, args, outputs))
    outputs = names_of(body.body)
    return Graph(nodes, tensors, inputs, outputs)


def _tensor(name: str, ty, *, is_param: bool = False, producer: str | None = None) -> Tensor:
    shape, dtype = None, "unknown"
    if getattr(ty, "dtype", None) is not None and getattr(ty, "shape", None) is not None:
        dtype = str(ty.dtype)
        dims = ty.shape.values if hasattr(ty.shape, "values") else ty.shape
        shape = tuple(_dim(d) for d in dims)
    size = tensor_bytes(static_shape(shape), dtype)
    return Tensor(name, shape, dtype, size, is_param=is_param, producer=producer)


def _dim(d) -> int | str:
    try:
        return int(d)
    except (TypeError, ValueError):
        return str(d)


def tvm_comparison(
    source,
    input_shapes: dict[str, tuple[int, ...]] | None = None,
    time_limit_s: float = 1.0,
    progress: ProgressFn | None = None,
) -> dict:
    """TVM's static allocation total next to our best plan of the same kernel tensors.

    Both sides plan the tensors TVM's build allocates (kernel outputs, reshapes as views
    of their input, graph inputs, weights and returned outputs apart) in TVM's execution
    order; ``ours_reordered_bytes`` adds our order search, which the build would have to
    follow. ``ratio`` is ours / TVM's (below 1: we need less).
    """
    import tvm

    report = progress or (lambda fraction, message: None)
    found = tvm_memory(source, input_shapes, progress=lambda f, m: report(0.8 * f, m))
    report(0.85, "our planners on TVM's kernel tensors")
    same_order = MemoryConfig(in_place=True, order_search=False, time_limit_s=time_limit_s)
    reordered = MemoryConfig(in_place=True, order_search=True, time_limit_s=time_limit_s)
    planners: dict[str, int] = {}
    ours = lower = ours_reordered = 0
    for graph in found.graphs:
        plan = plan_memory(graph, same_order).to_dict(plans=False)
        ours += plan["planners"][plan["best"]]
        lower += plan["lower_bound_bytes"]
        for name, size in plan["planners"].items():
            planners[name] = planners.get(name, 0) + size
        again = plan_memory(graph, reordered).to_dict(plans=False)
        ours_reordered += again["planners"][again["best"]]
    best = min(planners, key=planners.get) if planners else None
    report(1.0, "compared with TVM's static plan")
    return {
        "tvm_version": tvm.__version__,
        "tvm_pass": "relax.transform.StaticPlanBlockMemory",
        "tvm_static_bytes": found.static_bytes,
        "tvm_storages": found.storages,
        "tvm_planned_tensors": found.planned_tensors,
        "tvm_run_time_allocations": found.unplanned,
        "kernels": found.kernels,
        "segments": len(found.graphs),
        "fallback_nodes": found.fallback_nodes,
        "lower_bound_bytes": lower,
        "planners": planners,
        "ours_planner": best,
        "ours_bytes": ours,
        "ours_reordered_bytes": ours_reordered,
        "saving_bytes": found.static_bytes - ours,
        "ratio": round(ours / found.static_bytes, 4) if found.static_bytes else None,
        "time_s": round(found.time_s, 3),
    }
