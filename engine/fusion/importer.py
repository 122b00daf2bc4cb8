"""ONNX -> simplified ONNX -> Relax, remembering which ONNX node each Relax binding came from.

TVM's ONNX frontend keeps no spans, so the importer is subclassed: every converted
node's result is bound to a variable, and the bindings emitted between one node's result
and the previous one's belong to that node. The fusion plan uses this map to name the
ONNX nodes inside every kernel. A node the frontend cannot convert raises
:class:`NodeImportError` naming the node, so the delegate can run it with onnxruntime.
"""

from __future__ import annotations

import contextlib
import io
import time
import warnings
from dataclasses import dataclass, field

import onnx

from engine.errors import EngineError
from engine.graph.shapes import without_heavy_weights

_MAX_REASON = 300


class NodeImportError(EngineError):
    """TVM's ONNX frontend failed on one node."""

    code = "tvm_import_failed"

    def __init__(self, node: str, op_type: str, reason: str):
        super().__init__(f"TVM could not import node '{node}' ({op_type}): {reason}")
        self.node, self.op_type, self.reason = node, op_type, reason


@dataclass
class ImportedModule:
    """A Relax module with weights as parameters, and the node of every binding."""

    mod: object  # tvm.IRModule
    params: dict[str, object]  # name -> numpy array, in the order main expects them
    input_names: list[str]
    # Relax var name -> the ONNX nodes it computes: one, or more where a rewrite made one
    # binding of several nodes' work (a Winograd output transform with its bias and ReLU)
    binding_nodes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    folded_nodes: list[str] = field(default_factory=list)  # converted to constants at import


def supported_op_types() -> frozenset[str]:
    """ONNX op types TVM's Relax frontend has a converter for."""
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    return frozenset(_get_convert_map()) | {"Constant", "If"}


def simplify(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict]:
    """Fold constants (weights included) and shape arithmetic with onnxslim.

    ``engine.graph.simplify`` keeps large constants computed so that analysis stays
    light; a compiler wants the opposite, weights as data (parameters) rather than
    ``ConstantOfShape`` nodes run on every inference, and onnxslim's Conv+BN folding. A
    failing simplifier is not fatal: the model is kept and the report says why.
    """
    import onnxslim

    started = time.perf_counter()
    report = {"tool": f"onnxslim {onnxslim.__version__}", "nodes_before": len(model.graph.node)}
    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # onnxslim edits its input
    # onnxslim drops initializers from the inputs, which IR < 4 requires there.
    copy.ir_version = max(copy.ir_version, 4)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            simplified = onnxslim.slim(copy)
        # the graph, not 500 MB of weights serialized once more (3.5 s on VGG-16)
        onnx.checker.check_model(without_heavy_weights(simplified))
    except Exception as e:  # noqa: BLE001 - a third-party optimizer may fail in any way
        simplified = model
        report["warning"] = f"not simplified: {_one_line(e)}"
    report["nodes_after"] = len(simplified.graph.node)
    report["seconds"] = round(time.perf_counter() - started, 3)
    return simplified, report


def prepare(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy with unique node names (``name_uniquely``) and no initializers listed as
    inputs (IR < 4 style; the frontend would otherwise take them twice)."""
    from engine.graph.topology import name_uniquely

    out = onnx.ModelProto()
    out.CopyFrom(model)
    name_uniquely(out.graph.node)
    initializers = {t.name for t in out.graph.initializer}
    kept = [v for v in out.graph.input if v.name not in initializers]
    del out.graph.input[:]
    out.graph.input.extend(kept)
    _same_pads(out)
    _pads_into_convs(out)
    # Weights nothing reads would still be parameters of the TVM module (and stored).
    used = _read_names(out.graph) | {o.name for o in out.graph.output}
    weights = [t for t in out.graph.initializer if t.name in used]
    if len(weights) < len(out.graph.initializer):
        del out.graph.initializer[:]
        out.graph.initializer.extend(weights)
    _pretranspose_gemm_weights(out)
    _global_pools(out)
    return out


def _read_names(graph: onnx.GraphProto) -> set[str]:
    """Every tensor name a node of ``graph`` or of its subgraphs reads."""
    names = set()
    for node in graph.node:
        names.update(node.input)
        for attribute in node.attribute:
            for sub in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
                names |= _read_names(sub)
    return names


def _pretranspose_gemm_weights(model: onnx.ModelProto) -> None:
    """Gemm(transB=1) with a constant B: store B transposed, so no kernel transposes the
    weights on every inference."""
    from onnx import numpy_helper

    weights = {t.name: t for t in model.graph.initializer}
    readers: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    for node in model.graph.node:
        if node.op_type != "Gemm" or len(node.input) < 2 or readers.get(node.input[1]) != 1:
            continue
        trans_b = next((a for a in node.attribute if a.name == "transB"), None)
        weight = weights.get(node.input[1])
        if trans_b is None or trans_b.i != 1 or weight is None or len(weight.dims) != 2:
            continue
        array = numpy_helper.to_array(weight).T.copy()
        weight.CopyFrom(numpy_helper.from_array(array, weight.name))
        trans_b.i = 0


_GLOBAL_POOLS = {"AveragePool": "GlobalAveragePool", "MaxPool": "GlobalMaxPool"}


def _same_pads(model: onnx.ModelProto) -> None:
    """A conv's ``auto_pad`` SAME_UPPER / SAME_LOWER as the explicit pads it means, where
    its input's spatial shape is known: TVM's frontend pads such a conv as a kernel of its
    own before it (transformers' EfficientNet: every stride-1 depthwise conv), where pads
    go into the conv's own loops. The numbers are ONNX's: total = max((ceil(in / stride)
    - 1) * stride + (kernel - 1) * dilation + 1 - in, 0), the odd one at the end for
    SAME_UPPER, at the start for SAME_LOWER."""
    from onnx import helper

    shapes = {
        v.name: [
            d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim
        ]
        for v in (*model.graph.input, *model.graph.value_info)
        if v.type.tensor_type.HasField("shape")
    }
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type != "Conv" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        mode = attrs.get("auto_pad", b"NOTSET")
        if mode not in (b"SAME_UPPER", b"SAME_LOWER"):
            continue
        dims = shapes.get(node.input[0])
        kernel = list(attrs.get("kernel_shape") or weights.get(node.input[1], [])[2:])
        if not dims or len(dims) < 3 or any(not d for d in dims[2:]):
            continue  # unknown spatial shape: TVM's own padding stays
        spatial = dims[2:]
        if len(kernel) != len(spatial):
            continue
        strides = list(attrs.get("strides", [1] * len(spatial)))
        dilations = list(attrs.get("dilations", [1] * len(spatial)))
        begins, ends = [], []
        for size, k, stride, dilation in zip(spatial, kernel, strides, dilations, strict=True):
            total = max((-(-size // stride) - 1) * stride + (k - 1) * dilation + 1 - size, 0)
            small, large = total // 2, total - total // 2
            begins.append(small if mode == b"SAME_UPPER" else large)
            ends.append(large if mode == b"SAME_UPPER" else small)
        kept = [a for a in node.attribute if a.name not in ("auto_pad", "pads")]
        del node.attribute[:]
        node.attribute.extend([*kept, helper.make_attribute("pads", begins + ends)])


def _pads_into_convs(model: onnx.ModelProto) -> None:
    """A zero ``Pad`` of the spatial axes read only by convs goes into the convs' own
    padding (onnxruntime's PadFusion does the same). transformers' EfficientNet pads
    before every strided depthwise conv ("same" padding, as TensorFlow pads): the pad was a
    kernel of its own, writing the padded activation out and reading it back (0.16 ms of
    1.3 here), and in channel blocks it also sent the activation back to NCHW and again
    into blocks around it."""
    import numpy as np
    from onnx import helper, numpy_helper

    constants = {t.name: t for t in model.graph.initializer}
    readers: dict[str, list] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    outputs = {o.name for o in model.graph.output}
    folded = set()
    for pad in model.graph.node:
        if pad.op_type != "Pad" or pad.domain not in ("", "ai.onnx") or len(pad.input) < 2:
            continue
        convs = readers.get(pad.output[0], [])
        if pad.output[0] in outputs or not convs:
            continue
        if any(c.op_type != "Conv" or c.input[0] != pad.output[0] for c in convs):
            continue
        if any(a.name == "mode" and a.s not in (b"constant", b"") for a in pad.attribute):
            continue
        if len(pad.input) > 3 and pad.input[3]:
            continue  # axes given: rare; left as it is
        if pad.input[1] not in constants:
            continue
        amounts = numpy_helper.to_array(constants[pad.input[1]]).astype(np.int64).ravel()
        if len(pad.input) > 2 and pad.input[2]:
            value = constants.get(pad.input[2])
            if value is None or np.any(numpy_helper.to_array(value) != 0):
                continue
        rank = len(amounts) // 2
        begins, ends = amounts[:rank], amounts[rank:]
        if rank < 3 or np.any(amounts < 0) or np.any(begins[:2]) or np.any(ends[:2]):
            continue  # batch or channels padded, or a crop: not a conv's padding
        fitted = []
        for conv in convs:
            attrs = {a.name: a for a in conv.attribute}
            auto = attrs.get("auto_pad")
            if auto is not None and auto.s not in (b"NOTSET", b"", b"VALID"):
                break  # SAME_*: the padding depends on the shape; left as it is
            own = list(attrs["pads"].ints) if "pads" in attrs else [0] * (2 * (rank - 2))
            if len(own) != 2 * (rank - 2):
                break
            spatial = rank - 2
            new = [own[k] + int(begins[2 + k]) for k in range(spatial)]
            new += [own[spatial + k] + int(ends[2 + k]) for k in range(spatial)]
            fitted.append((conv, new))
        else:
            for conv, new in fitted:
                kept = [a for a in conv.attribute if a.name not in ("pads", "auto_pad")]
                del conv.attribute[:]
                conv.attribute.extend([*kept, helper.make_attribute("pads", new)])
                conv.input[0] = pad.input[0]
            folded.add(pad.name or id(pad))
    if folded:
        kept = [n for n in model.graph.node if (n.name or id(n)) not in folded]
        del model.graph.node[:]
        model.graph.node.extend(kept)


def _global_pools(model: onnx.ModelProto) -> None:
    """A pool whose window covers its whole input (one output position, no padding) as
    the global pool it is. transformers' EfficientNet pools 7x7 with a 640x640 window in
    ceil mode; TVM's pool loops over every window position, bounds-checked: 150 ms where
    onnxruntime takes 0.03. Average over the window clipped to the input is the global
    mean whether or not padding counts (no padding here), as onnxruntime computes it.
    A pool whose input shape is unknown is left as it is."""
    shapes = {
        v.name: [
            d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim
        ]
        for v in (*model.graph.input, *model.graph.value_info)
        if v.type.tensor_type.HasField("shape")
    }
    for node in model.graph.node:
        if node.op_type not in _GLOBAL_POOLS or len(node.output) != 1 or node.domain:
            continue
        dims = shapes.get(node.input[0])
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if not dims or len(dims) < 3 or any(d is None for d in dims[2:]):
            continue
        spatial = dims[2:]
        kernel = list(attrs.get("kernel_shape", []))
        if (
            len(kernel) != len(spatial)
            or any(k < d for k, d in zip(kernel, spatial, strict=True))
            or any(attrs.get("pads", [0]))
            or attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID")
            or any(x != 1 for x in attrs.get("dilations", [1]))
            or _pooled_extents(spatial, kernel, attrs) != [1] * len(spatial)
        ):
            continue
        node.op_type = _GLOBAL_POOLS[node.op_type]
        del node.attribute[:]


def _pooled_extents(spatial: list[int], kernel: list[int], attrs: dict) -> list[int] | None:
    """Output positions per axis of an unpadded pool (ONNX's floor or ceil rule)."""
    strides = list(attrs.get("strides", [1] * len(spatial)))
    if len(strides) != len(spatial) or any(s < 1 for s in strides):
        return None
    ceil = bool(attrs.get("ceil_mode", 0))
    return [
        (-(-(d - k) // s) if ceil else (d - k) // s) + 1
        for d, k, s in zip(spatial, kernel, strides, strict=True)
    ]


def import_onnx(
    model: onnx.ModelProto, shapes: dict[str, list[int]], dtypes: dict[str, str]
) -> ImportedModule:
    """Import ``model`` (unique node names, sorted) into Relax with weights as parameters.

    Raises :class:`NodeImportError` for the first node the frontend rejects.
    """
    from tvm import relax
    from tvm.relax.frontend.onnx.onnx_frontend import ONNXGraphImporter

    class MappingImporter(ONNXGraphImporter):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.results: list[tuple[str, list]] = []

        def _convert_operator(self, op_name, inputs, attrs, opset):
            node = attrs["tvm_custom"]["name"]
            try:
                sym = super()._convert_operator(op_name, inputs, attrs, opset)
            except Exception as e:  # noqa: BLE001 - converters raise anything
                raise NodeImportError(node, op_name, _one_line(e)) from e
            if isinstance(sym, relax.Call):
                sym = self.bb.emit(sym)  # a named result marks where this node ends
            self.results.append((node, _vars_of(sym, relax)))
            return sym

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    importer = MappingImporter(shapes, dtypes, keep_params_in_input=True)
    # The frontend prints every failing node's inputs (constants included) to stdout.
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            mod = importer.from_onnx(model.graph, opset)
        except NodeImportError:
            _close_blocks(importer.bb)
            raise
        except Exception as e:  # noqa: BLE001 - e.g. an If whose branches do not convert
            _close_blocks(importer.bb)
            raise NodeImportError("<graph>", "-", _one_line(e)) from e
    mod, params = relax.frontend.detach_params(mod)
    bindings = [b for block in mod["main"].body.blocks for b in block.bindings]
    owners, folded = _map_bindings(bindings, importer.results)
    mod, mapping = _rename_bindings(mod, owners, relax)
    names = [p.name for p in mod["main"].params]
    num_input = int(mod["main"].attrs["num_input"])
    values = {v: t.numpy() for v, t in zip(names[num_input:], params.get("main", []), strict=True)}
    return ImportedModule(mod, values, names[:num_input], mapping, folded)


def _close_blocks(builder) -> None:
    """End what an import that raised left open in its BlockBuilder: the binding block its
    dataflow scope begins on the way out and the function's variable scope (the frontend's
    scopes end neither on an exception). Left open, the builder prints "BlockBuilder
    destroyed with remaining blocks!" when it is collected, once for every import that
    raised (each segment a node failed to convert). ``_end_block`` is the builder's own
    private step, as the scopes of apache-tvm 0.27 call it (``DataflowScope.__exit__``)."""
    for end in (builder._end_block, builder.end_scope):
        try:
            end()
        except Exception:  # noqa: BLE001 - nothing (more) open: TVM's check raises
            return


def _map_bindings(bindings, results) -> tuple[dict, list[str]]:
    """Assign each binding to the node whose result closes the run of bindings it is in."""
    position = {b.var: i for i, b in enumerate(bindings)}
    mapping: dict = {}
    folded = []
    end = -1
    for node, result_vars in results:
        new = [position[v] for v in result_vars if v in position and position[v] > end]
        if not new:
            folded.append(node)
            continue
        stop = max(new)
        for i in range(end + 1, stop + 1):
            mapping[bindings[i].var] = node
        end = stop
    return mapping, folded


def _rename_bindings(mod, owners: dict, relax) -> tuple[object, dict[str, tuple[str, ...]]]:
    """Give every binding a unique name ``b<node index>_<k>`` that survives fusion.

    The frontend reuses names (``lv``, ``lv1``) across nodes; FuseOps keeps the names of
    the bindings it moves into a fused function, so unique names let the plan read back
    which nodes each kernel holds.
    """
    index: dict[str, int] = {}
    count: dict[str, int] = {}
    new_names: dict = {}
    for var, node in owners.items():
        k = index.setdefault(node, len(index))
        count[node] = count.get(node, -1) + 1
        new_names[var] = f"b{k}_{count[node]}"
    by_name = {name: (owners[var],) for var, name in new_names.items()}

    return apply_names(mod, new_names), by_name


def apply_names(mod, new_names: dict):
    """Rename ``main``'s binding variables (``{Var: name}``); others keep their names."""
    from tvm import relax

    @relax.expr_functor.mutator
    class Renamer(relax.PyExprMutator):
        def visit_var_def_(self, var):
            name = new_names.get(var)
            return var if name is None else relax.Var(name, var.ty)

        def visit_dataflow_var_def_(self, var):
            name = new_names.get(var)
            return var if name is None else relax.DataflowVar(name, var.ty)

    main = Renamer().visit_expr(mod["main"])
    mod = mod.clone()
    mod["main"] = main
    return mod


def restore_names(old_main, new_mod):
    """After passes that rebuilt bindings in the same order (ConvertLayout, the weight
    panels, then LiftTransformParams removing weight-only ones), give them back their
    old names.

    A new binding takes the name of the next old one of the same operator; the search
    may pass over old bindings that compute on weights alone (lifted out), never over one
    that computes on the model's data: a binding a pass inserted (a layout transform, a
    panel product's reshapes) stays unnamed instead of taking a later binding's name and
    shifting every name after it. A weight-panel product (``einsum``) takes its matmul's.
    """
    from tvm import relax

    weights = set(old_main.params[int(old_main.attrs["num_input"]) :])
    old, lifted = [], set()
    for block in old_main.body.blocks:
        for b in block.bindings:
            used = _free_vars(b.value, relax)
            if all(v in weights or v in lifted for v in used):
                lifted.add(b.var)
            old.append((b.var.name, _op_key(b.value, relax), b.var in lifted))
    names, i = {}, 0
    main = new_mod["main"]
    for k, param in enumerate(main.params[int(main.attrs["num_input"]) :]):
        names[param] = f"weight{k}"  # lifted weights are named lv.., like FuseOps' results
    for block in main.body.blocks:
        for b in block.bindings:
            key = _op_key(b.value, relax)
            j = i
            while j < len(old) and old[j][1] != key and old[j][2]:
                j += 1
            if j < len(old) and old[j][1] == key:
                names[b.var] = old[j][0]
                i = j + 1
    return apply_names(new_mod, names)


def _op_key(value, relax) -> str:
    if isinstance(value, relax.Call):
        name = str(getattr(value.op, "name", None) or getattr(value.op, "name_hint", "call"))
        return _SAME_OPERATOR.get(name, name)
    return type(value).__name__


_SAME_OPERATOR = {"relax.einsum": "relax.matmul"}  # weight_panels' products


def _free_vars(expr, relax) -> list:
    return list(relax.analysis.free_vars(expr)) if isinstance(expr, relax.Expr) else []


def _vars_of(expr, relax) -> list:
    if isinstance(expr, relax.Var):
        return [expr]
    if isinstance(expr, relax.Tuple):
        return [v for field_ in expr.fields for v in _vars_of(field_, relax)]
    if isinstance(expr, tuple | list):
        return [v for item in expr for v in _vars_of(item, relax)]
    return []


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    first = next((line for line in text if line.strip()), type(e).__name__)
    return f"{type(e).__name__}: {first.strip()}"[:_MAX_REASON]
