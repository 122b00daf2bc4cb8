"""Compile one TVM segment: plan its kernels, schedule them, build and export the library."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.fusion.conv_layout import BLOCKED, NCHW, nchw_layouts, to_blocked, weights_to_transpose
from engine.fusion.importer import ImportedModule, restore_names
from engine.fusion.lowering import KernelCall, fuse_tir, kernel_calls, lower_to_fused
from engine.fusion.schedules import vector_lanes
from engine.fusion.weight_panels import pack_weight_panels
from engine.fusion.winograd import to_winograd
from engine.fusion.workloads import workload_key, workload_module

log = logging.getLogger(__name__)


@dataclass
class FusedSegment:
    """A segment after FuseOps: its kernel calls, and the module to build."""

    imported: ImportedModule
    legal: object
    fused: object
    calls: list[KernelCall]  # kernels (views excluded)
    views: list[KernelCall] = field(default_factory=list)  # reshapes the VM runs as views
    segment: object = None  # the delegate.Segment it compiles


@dataclass
class BuiltSegment:
    library: str
    params_file: str | None  # None: built to time kernels only, no parameters written
    param_names: list[str]
    # kernel function -> "tuned" | "hand-written" | "tiled" | "parallel" | "none"
    schedules: dict[str, str]
    kernel_names: set[str]
    kernels_library: str | None = None  # the kernels alone (TargetSpec.kernels_library)


def fuse_segment(
    imported: ImportedModule,
    target,
    node_order: list[str],
    conv_layout: str = NCHW,
    *,
    weights: bool = True,
) -> FusedSegment:
    """Prepare the weights, legalize and FuseOps; read the kernels (and views) back.
    ``conv_layout``: see ``engine.fusion.conv_layout``. ``weights=False``: the kernels
    only, to count them; the prepared weights are not computed (the result has none and
    cannot be built)."""
    if str(target.kind.name) == "llvm":
        imported = pretransform_weights(imported, target, conv_layout, compute=weights)
        if conv_layout == BLOCKED:
            imported = to_winograd(imported, vector_lanes(target))
    legal, fused = lower_to_fused(imported.mod, target)
    calls = kernel_calls(fused, legal, imported.binding_nodes, node_order)
    kernels, views = split_views(fused, calls)
    return FusedSegment(imported, legal, fused, kernels, views)


def pretransform_weights(
    imported: ImportedModule, target, conv_layout: str = NCHW, compute: bool = True
) -> ImportedModule:
    """Store conv weights as IHWO (output channels innermost, where the default schedule
    vectorizes), or in channel blocks for the blocked layout, and bias reshapes done,
    computed once here instead of on every inference.

    ConvertLayout inserts the weight transposes, LiftTransformParams moves everything
    that depends on weights only into ``main_transform_params``, which runs now, once.
    ``compute=False``: ``main`` as it will be, without running the transform (the fusion
    rules' trials only count kernels: VGG-19's 548 MB of weights took 2.7 s a trial).
    """
    import tvm
    from tvm import relax

    imported = _bind_scalars(imported)
    mod = imported.mod
    if conv_layout == BLOCKED:
        mod = to_blocked(mod, vector_lanes(target))  # LayoutUnsupported: caller keeps NCHW
    elif weights_to_transpose(mod):
        try:
            mod = relax.transform.ConvertLayout({}, nchw_layouts)(mod)
        except Exception:  # noqa: BLE001 - some ops cannot take the layout: keep OIHW
            mod = imported.mod
    try:
        mod = pack_weight_panels(mod)
    except Exception:  # noqa: BLE001 - an optimization TVM refused: build without panels
        log.warning("weight panels failed; weights stay as they are", exc_info=True)
    mod = relax.transform.LiftTransformParams()(mod)
    if "main_transform_params" not in [gv.name_hint for gv in mod.get_global_vars()]:
        return imported
    if not compute:
        returned = mod["main_transform_params"].ret_ty
        fields = returned.fields if isinstance(returned, relax.TupleType) else [returned]
        if not all(isinstance(t, relax.TensorType) for t in fields):
            return imported  # as below: a shape computed from weights stays in main
        return _lifted(imported, mod, {})
    transform = tvm.IRModule({"main_transform_params": mod["main_transform_params"]})
    vm = relax.VirtualMachine(tvm.compile(transform, tvm.target.Target("llvm")), tvm.cpu())
    device = tvm.cpu()
    inputs = tvm.runtime.convert([tvm.runtime.tensor(v, device) for v in imported.params.values()])
    outputs = vm["main_transform_params"](inputs)
    if not all(hasattr(o, "numpy") for o in outputs):
        return imported  # a shape computed from weights: not a tensor to store, keep as is
    return _lifted(imported, mod, {f"weight{k}": o.numpy() for k, o in enumerate(outputs)})


def _lifted(imported: ImportedModule, mod, params: dict) -> ImportedModule:
    """``imported`` with ``mod``'s ``main`` (the weights' transform lifted out of it) on
    ``params``, the transform's outputs."""
    import tvm

    lifted = tvm.IRModule(
        {gv: f for gv, f in mod.functions.items() if gv.name_hint != "main_transform_params"}
    )
    lifted = restore_names(imported.mod["main"], lifted)
    return ImportedModule(
        lifted, params, imported.input_names, imported.binding_nodes, imported.folded_nodes
    )


def _bind_scalars(imported: ImportedModule) -> ImportedModule:
    """One-element weights (a ``Pow``'s exponent, an epsilon) as constants of ``main``:
    legalization can then see them (``x ** 3`` as two multiplies, see
    ``lowering.fast_math_legalization``) and constant folding use them."""
    import tvm
    from tvm import relax

    scalars = {n: v for n, v in imported.params.items() if np.asarray(v).size == 1}
    if not scalars:
        return imported
    bound = {n: tvm.runtime.tensor(np.asarray(v)) for n, v in scalars.items()}
    mod = relax.transform.BindParams("main", bound)(imported.mod)
    params = {n: v for n, v in imported.params.items() if n not in scalars}
    return ImportedModule(
        mod, params, imported.input_names, imported.binding_nodes, imported.folded_nodes
    )


def unfused_calls(segment: FusedSegment, node_order: list[str]) -> list[KernelCall]:
    """One kernel per legalized operator: the 'no fusion' baseline."""
    calls = kernel_calls(segment.legal, segment.legal, segment.imported.binding_nodes, node_order)
    return split_views(segment.legal, calls)[0]


def split_views(mod, calls: list[KernelCall]) -> tuple[list[KernelCall], list[KernelCall]]:
    """Kernels made of reshapes only become views at run time (RewriteDataflowReshape)."""
    from tvm import relax, tirx

    kernels, views = [], []
    for call in calls:
        prims = [mod[name] for name in call.prims]
        is_view = all(
            isinstance(f, tirx.PrimFunc) and relax.analysis.has_reshape_pattern(f) for f in prims
        )
        (views if is_view else kernels).append(call)
    return kernels, views


def build_segment(
    segment: FusedSegment,
    spec,
    directory: Path,
    stem: str,
    tuned: dict | None = None,
    *,
    write_params: bool = True,
) -> BuiltSegment:
    """FuseTIR, apply ``tuned`` schedules (workload key -> PrimFunc) then default ones,
    compile, and write ``<stem>.so`` and (unless ``write_params`` is false: a build only
    to time kernels, whose caller holds the weights) ``<stem>.params.npz`` into
    ``directory``."""
    import tvm
    from tvm import relax

    from engine.fusion.schedules import apply_default_schedules

    target = spec.tvm_target()
    mod = fuse_tir(segment.fused, target)
    if tuned:
        mod = _apply_tuned(mod, tuned)
    if spec.kind == "llvm":
        mod, schedules = apply_default_schedules(mod, target)
    else:
        from tvm.s_tir import dlight

        with target:
            mod = dlight.ApplyDefaultSchedule(dlight.gpu.Fallback())(mod)
        schedules = {}
    backend = relax.backend
    pipeline = backend.cuda.pipeline if spec.kind == "cuda" else backend.cpu_generic.pipeline
    lowering = tvm.transform.Sequential(
        pipeline.dataflow_lower_passes(target) + pipeline.finalize_passes(target)
    )
    executable = tvm.compile(mod, target, relax_pipeline=lowering)
    library = directory / f"{stem}.so"
    executable.export_library(str(library), **spec.export_options())
    kernels_library = None
    if spec.kernels_library:
        kernels_library = export_kernels(executable, mod, spec, directory / f"{stem}.kernels.so")
    params_file = save_params(segment, directory, stem) if write_params else None
    kernel_names = {
        gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)
    }
    return BuiltSegment(
        library.name,
        params_file,
        list(segment.imported.params),
        schedules,
        kernel_names,
        kernels_library,
    )


def save_params(segment: FusedSegment, directory: Path, stem: str) -> str:
    """Write the segment's weights as ``<stem>.params.npz``; returns the file's name."""
    path = directory / f"{stem}.params.npz"
    np.savez(path, **segment.imported.params)
    return path.name


def export_kernels(executable, mod, spec, library: Path) -> str:
    """Write the kernels' own library (the VM executable's imported code module) and
    ``<library>.json``: each kernel's arguments ``[[shape, dtype], ...]``, or ``null`` for
    a kernel with symbolic shapes or scalar arguments (it cannot be timed alone)."""
    import json

    import tvm

    code = [m for m in executable.mod.imports if m.kind in ("llvm", "library", "c")]
    if not code:
        raise RuntimeError(f"no code module among {[m.kind for m in executable.mod.imports]}")
    code[0].export_library(str(library), **spec.export_options())
    arguments: dict[str, list | None] = {}
    for gv, func in mod.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        specs = []
        for param in func.params:
            ty = param.ty  # a buffer's type has its shape; a scalar argument's has none
            dims = [getattr(d, "value", d) for d in getattr(ty, "shape", None) or [None]]
            if not all(isinstance(d, int) for d in dims):
                specs = None
                break
            specs.append([dims, str(ty.dtype)])
        arguments[gv.name_hint] = specs
    (library.parent / kernel_arguments_file(library.name)).write_text(json.dumps(arguments))
    return library.name


def kernel_arguments_file(kernels_library: str) -> str:
    """The file beside a kernels' library that holds their arguments."""
    return str(Path(kernels_library).with_suffix(".json"))


def _apply_tuned(mod, tuned: dict):
    import tvm

    updates = {}
    for gv, func in mod.functions.items():
        if isinstance(func, tvm.tirx.PrimFunc):
            chosen = tuned.get(workload_key(workload_module(func)))
            if chosen is not None:
                updates[gv] = chosen.without_attr("global_symbol")
    mod = mod.clone()
    for gv, func in updates.items():
        mod[gv] = func
    return mod
