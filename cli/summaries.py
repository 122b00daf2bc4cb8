"""A few lines per stage report for a terminal (``--json`` prints the report itself)."""

from __future__ import annotations

from engine.graph.shapes import format_shape

_TOP = 10
_TOP_OPS = 8


def analyze(d: dict) -> str:
    model = d["model"]
    lines = [
        f"model        {model['graph_name'] or '-'}  ({model['producer'] or 'unknown producer'}, "
        f"IR {model['ir_version']}, opsets {model['opsets']})",
        f"nodes        {d['nodes']}",
        f"params       {d['params'] / 1e6:.3f} M  ({d['param_bytes'] / 1e6:.2f} MB)",
        f"MACs         {d['macs'] / 1e9:.3f} G",
        f"FLOPs        {d['flops'] / 1e9:.3f} G",
        f"activations  {d['activation_bytes'] / 1e6:.2f} MB",
    ]
    lines += [
        f"input        {s['name']}: {format_shape(s['shape'])} {s['dtype']}" for s in d["inputs"]
    ]
    lines += [
        f"output       {s['name']}: {format_shape(s['shape'])} {s['dtype']}" for s in d["outputs"]
    ]
    top = ", ".join(f"{op} {n}" for op, n in list(d["ops"].items())[:_TOP_OPS])
    lines.append(f"ops          {top}{', ...' if len(d['ops']) > _TOP_OPS else ''}")
    lines.append(f"not costed   {len(d['not_costed'])}")
    structure = d.get("structure")
    if structure:
        resolutions = [
            format_shape(s["resolution"]) if s.get("resolution") else "-"
            for s in structure["stages"]
        ]
        lines.append(f"stages       {len(structure['stages'])}  ({', '.join(resolutions)})")
        lines.append(f"blocks       {len(structure['blocks'])}  (cut at MaxPool / Concat)")
        lines.append(f"chains       {len(structure['chains'])}")
    prep = d.get("preparation")
    if prep:
        folded = "folded" if prep["folded"] else "not folded"
        lines.append(
            f"prepared     {prep['nodes_before']} -> {prep['nodes_after']} nodes, {folded} "
            f"({prep['tool']}, {prep['seconds']:.2f} s)"
        )
        for b in prep["inputs"]:
            defaults = [i for i, s in enumerate(b["sources"]) if s == "default"]
            note = f"  (axes {defaults} by default)" if defaults else ""
            lines.append(f"bound        {b['name']}: {format_shape(b['shape'])}{note}")
    lines += [f"warning      {w}" for w in d["warnings"]]
    if "node_list" in d:
        lines.append("")
        lines += [
            f"{n['name']:<32} {n['op_type']:<20} {n['macs'] if n['costed'] else '-'!s:>14}"
            for n in d["node_list"]
        ]
    return "\n".join(lines)


def profile(d: dict) -> str:
    basis = "measured" if d["measured"] else f"predicted by {d['model']}"
    latency = d["latency_ms"]
    lines = [
        f"target       {d['target']} / {d['unit']} ({basis})",
        f"latency      {'unknown' if latency is None else f'{latency:.3f} ms'}",
    ]
    unit = d["unit"]

    def op_us(op: dict) -> float | None:
        value = op["latency_us"]
        return value.get(unit) if isinstance(value, dict) else value

    timed = sorted((o for o in d["ops"] if op_us(o)), key=lambda o: -op_us(o))
    lines += [f"  {o['name']:<32} {o['op_type']:<20} {op_us(o):>12.1f} us" for o in timed[:_TOP]]
    lines += [f"finding      {f['text']}" for f in d.get("findings", [])]
    lines += [f"warning      {w}" for w in d.get("warnings", [])]
    kernels = d.get("tvm_kernels")
    if kernels and "failed" not in kernels:
        lines.append(
            f"tvm          {kernels['latency_ms']:.3f} ms whole model (onnxruntime "
            f"{kernels['onnxruntime_latency_ms']:.3f} ms), {len(kernels['kernels'])} kernels, "
            f"median of {kernels['runs']} runs"
        )
    elif kernels:
        lines.append(f"tvm          not built: {kernels['failed']}")
    lines += _mobile_gpu(d.get("mobile_gpu"))
    return "\n".join(lines)


def _mobile_gpu(section: dict | None) -> list[str]:
    if not section:
        return []
    if not section["available"]:
        return [f"mobile gpu   not analyzed: {section['reason']}"]
    s = section["summary"]
    moved = "unknown" if s["boundary_bytes"] is None else f"{s['boundary_bytes']:,} B"
    waste = "unknown" if s["waste_fraction"] is None else f"{s['waste_fraction']:.1%}"
    lines = [
        f"mobile gpu   {section['unit']} via {section['api']} ({section['basis']}): "
        f"{s['gpu_partitions']} partitions, {s['boundaries']} boundaries ({moved}), "
        f"PHWC4 padding {waste}"
    ]
    return lines + [f"gpu finding  {f['text']}" for f in section["findings"]]


def partition(d: dict) -> str:
    if d.get("planned_on_graph"):
        return _graph_plan(d)
    lines = [
        f"{'algorithm':<16} {'makespan ms':>12} {'energy mJ':>10} {'speedup':>8} "
        f"{'solve s':>8} {'gap':>7}"
    ]
    for name, a in d["algorithms"].items():
        speedup = f"{a['speedup']:.2f}x" if a["speedup"] else "-"
        gap = f"{a['gap_to_bound']:>7.1%}" if a["gap_to_bound"] is not None else "      -"
        energy = f"{a['energy_mj']:>10.3f}" if a.get("energy_mj") is not None else "   unknown"
        lines.append(
            f"{name:<16} {a['makespan_ms']:>12.3f} {energy} {speedup:>8} {a['solve_s']:>8.3f} {gap}"
        )
    lines += [f"no plan      {n}: {m}" for n, m in d["failed"].items()]
    lines.append(d["verdict"])
    detail = d.get("objective_detail") or {}
    lines.append(
        f"objective    {detail.get('description', d.get('objective', 'latency'))}; energy "
        + (f"unknown: {d['energy_unknown']}" if d.get("energy_unknown") else "predicted")
    )
    trade = d.get("trade_off")
    if trade and trade.get("available"):
        front = ", ".join(
            f"{p['makespan_ms']:.3f} ms/{p['energy_mj']:.3f} mJ" for p in trade["front"]
        )
        lines.append(f"trade-off    Pareto front (predicted): {front}")
    elif trade:
        lines.append(f"trade-off    unavailable: {trade['reason']}")
    check = d.get("execution_check")
    if check:
        lines.append(f"execution    outputs match: {check['outputs_match']}")
    lines += [f"note         {n}" for n in d["notes"]]
    return "\n".join(lines)


def _graph_plan(d: dict) -> str:
    """A graph planner's result (GraphTurbo): kernels, off-core bytes and the ablation."""
    lines = [f"no plan      {n}: {m}" for n, m in d["failed"].items()]
    for r in d["results"].values():
        lines.append(r["verdict"])
        lines += [
            f"ablation     {a['step']:<20} {a['offcore_bytes']:>14,} off-core bytes"
            + (f"  {a['latency_ms']:.3f} ms (predicted)" if a["latency_ms"] is not None else "")
            for a in r.get("ablation", [])
        ]
        lines += [
            f"candidates   {c['step']:<40} "
            + (f"{c['count']:,}" if c["count"] < 1e6 else f"10^{c['log10']:g}")
            for c in r.get("candidate_counts") or []
        ]
        for s in r.get("design", {}).get("segments", []):
            lines.append(
                f"segment {s['segment']}    stages {s['stages']} -> {s['meeting_point']}: "
                + ", ".join(
                    f"{b['unit']} (depth {b['depth']}/{s['depth']}, width {b['width']}/{s['width']})"
                    for b in s["branches"]
                )
            )
    return "\n".join(lines)


def memplan(d: dict) -> str:
    lower = d["lower_bound_bytes"]
    lines = [
        f"lower bound  {lower / 1e6:.3f} MB  (peak of live bytes, step {d['peak_step']})",
        f"order        {d['order_method']}, gain {d['order_gain_bytes'] / 1e6:.3f} MB",
    ]
    for name in d["planner_kinds"]:
        arena = d["planners"].get(name)
        if arena is None:
            lines.append(f"{name:<18} skipped: {d['errors'].get(name)}")
            continue
        mark = "*" if name == d["best"] else " "
        valid = "INVALID" if name in d["errors"] else "valid"
        lines.append(
            f"{name:<18}{mark} {arena / 1e6:10.3f} MB  x{d['ratios'][name]:.4f}  "
            f"{d['planner_time_s'][name] * 1e3:8.1f} ms  {valid}"
        )
    if d.get("levels"):
        lv = d["levels"]
        lines.append(
            f"local buffer off-core bytes: {lv['offcore_bytes_before']} per layer, "
            f"{lv['offcore_bytes_after']} grouped"
        )
    tvm = d.get("tvm")
    if tvm and "failed" not in tvm:
        ratio = "" if tvm["ratio"] is None else f", x{tvm['ratio']:.3f} of TVM's"
        lines.append(
            f"tvm          {tvm['tvm_static_bytes'] / 1e6:.3f} MB in {tvm['tvm_storages']} "
            f"storages ({tvm['tvm_pass']}, TVM {tvm['tvm_version']}, {tvm['kernels']} kernels)"
        )
        lines.append(
            f"ours         {tvm['ours_bytes'] / 1e6:.3f} MB on the same tensors "
            f"({tvm['ours_planner']}{ratio}), lower bound {tvm['lower_bound_bytes'] / 1e6:.3f} MB"
        )
    elif tvm:
        lines.append(f"tvm          not compared: {tvm['failed']}")
    lines += [f"warning      {w}" for w in d.get("warnings", [])]
    return "\n".join(lines)


def compile(d: dict) -> str:
    lines = [
        f"{key:<24} {d[key]}"
        for key in (
            "kernel_count",
            "tvm_nodes",
            "latency_ms",
            "onnxruntime_latency_ms",
            "speed_vs_onnxruntime",
            "outputs_match",
            "artifact",
        )
    ]
    lines.append(f"{'fallback_nodes':<24} {len(d['fallback_nodes'])}")
    tuning = d["tuning"]
    if tuning.get("trials") or tuning.get("records_used"):
        lines.append(
            f"{'tuning':<24} {tuning['trials']} trials in {tuning['seconds']} s, "
            f"{tuning['records_used']} stored records applied"
        )
    in_model = tuning.get("in_model") or {}
    if in_model.get("checked"):
        lines.append(
            f"{'in_model_check':<24} {in_model['checked']} tuned kernels timed in the model, "
            f"{in_model['dropped']} dropped (not faster there than their default)"
        )
    check = tuning.get("end_to_end")
    if check and check.get("checked"):
        lines.append(
            f"{'whole_model_check':<24} kept {check['kept']} schedules "
            f"(tuned {check['tuned_ms']} ms, default {check['default_ms']} ms)"
        )
    return "\n".join(lines)


def accuracy(d: dict) -> str:
    lines = [f"verdict      {d['verdict'].upper()}: {d['reason']}"]
    for o in d["outputs"]:
        top = f", top-1 {_g(o['top1'])}, top-5 {_g(o['top5'])}" if o.get("top1") is not None else ""
        lines.append(
            f"output       {o['name']}: max abs {_g(o['max_abs'])}, mean rel "
            f"{_g(o['mean_rel'])}, cosine {_g(o['cosine'], 6)}, SNR {_g(o['snr_db'])} dB{top}"
        )
    first = d.get("first_divergent")
    if first:
        lines.append(f"first layer  {first['node']} ({first['op_type']}) -> {first['tensor']}")
    lines.append(f"layers       {len(d.get('layers', []))} compared")
    kept = (d.get("candidate") or {}).get("kept_fp32")
    if kept is not None:
        lines.append(f"kept fp32    {len(kept)} nodes: {', '.join(k['op_type'] for k in kept[:8])}")
    lines += [f"warning      {w}" for w in d.get("warnings", [])]
    return "\n".join(lines)


def _g(value, digits: int = 3) -> str:
    """A metric for reading: unknown (None, not a number) says so."""
    return "n/a" if not isinstance(value, (int, float)) else f"{value:.{digits}g}"


SUMMARY = {
    "analyze": analyze,
    "profile": profile,
    "partition": partition,
    "memplan": memplan,
    "compile": compile,
    "accuracy": accuracy,
}
