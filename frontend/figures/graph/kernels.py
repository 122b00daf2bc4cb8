"""The compiled kernels as a graph, to stand beside the model's graph: one node per kernel
(its ONNX nodes' ops), an edge wherever a tensor passes from one kernel's nodes to
another's, and the map both ways between kernels and the ONNX nodes they run, which links
a selection on one side to the other (frontend/static/workbench/graph-sides.js).

The kernel graph is written as an analysis (a node list in execution order) so that the
same levels, layout and explorer draw it.
"""

from __future__ import annotations

from frontend.figures.graph.metrics import Metric


def kernel_analysis(analysis: dict, compile_result: dict) -> tuple[dict, dict[str, list[str]]]:
    """An analysis-shaped dict of the compile result's kernels, and each kernel's ONNX
    nodes. Nodes the kernels do not list (run outside the compiled code, or folded) are
    left out; a kernel naming no node of this analysis is left out too."""
    nodes = analysis.get("node_list") or []
    index = {node["name"]: i for i, node in enumerate(nodes)}
    kernels = []
    for k in compile_result.get("kernels") or []:
        members = sorted(index[name] for name in k.get("nodes") or [] if name in index)
        if members:
            kernels.append((members[0], str(k["id"]), k, members))
    kernels.sort(key=lambda entry: entry[0])  # in the order of their first node
    kernel_of = {v: name for _first, name, _k, members in kernels for v in members}
    made = {t for v in kernel_of for t in nodes[v].get("outputs", []) if t}  # not inputs, weights
    node_list = []
    for _first, name, k, members in kernels:
        inside = {t for v in members for t in nodes[v].get("outputs", [])}
        reads = [
            t
            for v in members
            for t in nodes[v].get("inputs", [])
            if t and t not in inside and t in made
        ]
        outputs = [t for v in members for t in nodes[v].get("outputs", [])]
        shapes = [s for v in members for s in nodes[v].get("output_shapes", [])]
        sizes = [b for v in members for b in nodes[v].get("output_bytes") or []]
        ops = list(dict.fromkeys(k.get("op_types") or [nodes[v]["op_type"] for v in members]))
        node_list.append(
            {
                "name": name,
                "op_type": " + ".join(ops[:3]) + (" + …" if len(ops) > 3 else ""),
                "inputs": list(dict.fromkeys(reads)),
                "outputs": outputs,
                "output_shapes": shapes,
                "output_bytes": sizes if len(sizes) == len(outputs) else None,
                "flops": k.get("flops"),
                "bytes_read": k.get("bytes_in"),
                "bytes_written": k.get("bytes_out"),
                "params": k.get("param_bytes"),
                "costed": True,
                "attributes": {"nodes": len(members)},
            }
        )
    inputs = [{"name": t["name"]} for t in analysis.get("inputs", [])]
    nodes_of = {name: [nodes[v]["name"] for v in members] for _f, name, _k, members in kernels}
    return {"nodes": len(node_list), "inputs": inputs, "node_list": node_list}, nodes_of


def kernel_metrics(compile_result: dict) -> dict[str, Metric]:
    """Kernel time (measured by the compile stage on its target) and backend, by kernel."""
    kernels = compile_result.get("kernels") or []
    times = {str(k["id"]): k.get("time_us") for k in kernels if k.get("time_us") is not None}
    backend = {str(k["id"]): k.get("backend") for k in kernels if k.get("backend")}
    metrics = {}
    if times:
        metrics["kernel_us"] = Metric("kernel time, measured (µs)", values=times, unit="µs")
    if backend:
        metrics["backend"] = Metric("backend", "categorical", backend, aggregate="mode")
    return metrics
