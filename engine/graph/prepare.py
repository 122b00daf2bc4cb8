"""The prepared model: what every stage reads instead of the raw upload.

Built once per (model bytes, input shapes) and cached (:mod:`engine.graph.prepared_cache`):

1. the model is loaded and validated as an upload is, and every node gets a unique name
   (an unnamed node is named ``<op_type>_<index>`` in the user's own order), so the
   prepared graph and every report speak of the user's nodes;
2. every input dimension is bound: the user's shapes, else the declared size, else a
   documented default (:data:`DEFAULT_BATCH` on the first axis, :data:`DEFAULT_DIM`
   elsewhere; one symbol keeps one value across inputs), and each binding says where it
   came from;
3. shape arithmetic and constants are folded and every tensor gets a shape and a dtype.

Which folding tool: measured on the real-model set (``python bench/prepare_bench.py``, 18
exports of transformers and torch code by both torch exporters; bench/results/
prepare_bench.json):

- onnx's shape inference with data propagation left 12-44% of the tensors of 7 exports
  without a shape (EfficientNet 56% known, MobileNetV2's and BERT's MACs off by 100%: the
  Pad and Reshape targets are computed) and folds nothing;
- onnxruntime's symbolic shape inference knew every shape but Swin's (84%) and folds
  nothing: the shape arithmetic stays as nodes (MobileNetV2: 1,095 nodes), which TVM's
  importer rejects on 7 of the 18 exports;
- onnxslim knew every shape of all 18, MACs within 0.5% of the independent count, cut the
  nodes by up to 10x (MobileNetV2 1,095 -> 118, Swin 1,770 -> 284) keeping their names, and
  TVM imports 15 of 18 (the other three hold LSTM/GRU or a GPT-2 op TVM lacks, which the
  compile stage runs in onnxruntime), in 0.05-5.7 s.

So: onnxslim, with only its folding, dead-code and common-subexpression passes (no
fusion: the analysis shows the model's own ops; no weight tying: the parameters stay the
model's); where it fails, or leaves shapes unknown, onnxruntime's symbolic inference
supplies the shapes on the unfolded graph and the report says so.

A value nobody can know stays unknown: tensors whose shape is still unknown after all
this are listed (``unknown_shapes``) with the reason, never given a size of 0.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import onnx

from engine.errors import ProgressFn
from engine.graph import prepared_cache
from engine.graph.ir import SCOPE_KEY, build_graph, collector_paused
from engine.graph.loader import (
    ModelSource,
    check_model,
    check_node_limit,
    load_model,
    model_header,
    model_inputs,
    read_model_file,
)
from engine.graph.options import DEFAULT_BATCH, DEFAULT_DIM, PrepareOptions
from engine.graph.prepared import (
    PREPARE_VERSION,
    InputBinding,
    PreparationReport,
    PreparedModel,
)
from engine.graph.shapes import (
    apply_input_shapes,
    check_declared_sizes,
    check_tensor_sizes,
    explain_unknown_shapes,
    infer_shapes,
)
from engine.graph.tensors import type_spec
from engine.graph.topology import name_uniquely, sorted_model

MAX_FOLDED_BYTES = 1 << 20
"""Constants larger than this (after folding) stay computed, as in the input (a model whose
weights are ``ConstantOfShape`` fills stays small)."""
_SHAPE_OPS = frozenset({"Shape", "Size"})


@dataclass(frozen=True)
class Limits:
    """Limits an upload is held to (the web's settings; the CLI uses the defaults)."""

    max_bytes: int | None = None
    max_nodes: int = 200_000
    max_tensor_elements: int = 2**31


def prepare_model(
    source: ModelSource,
    options: PrepareOptions | None = None,
    *,
    limits: Limits = Limits(),
    cache_dir: str | Path | None = None,
    cache_max_bytes: int | None = None,
    progress: ProgressFn | None = None,
) -> PreparedModel:
    """Prepare ``source`` (a path, bytes or ``ModelProto``) for every stage.

    Raises what validation raises (:class:`~engine.errors.InvalidModelError`,
    :class:`~engine.errors.ModelLimitError`, :class:`~engine.errors.UnsupportedModelError`,
    :class:`~engine.errors.ShapeError`). With ``cache_dir``, a preparation of the same bytes
    and shapes is read back instead of being built again; with ``cache_max_bytes`` too,
    the cache is kept to that size, the least recently used preparations going first.
    """
    options = options or PrepareOptions()
    report = progress or _ignore
    report(0.0, "loading model")
    data = _bytes(source)
    sha = hashlib.sha256(data).hexdigest()
    key = _key(sha, options)
    if cache_dir is not None:
        cached = prepared_cache.load(Path(cache_dir), key)
        if cached is not None:
            report(1.0, "prepared model read from the cache")
            return cached
    prepared = _prepare(data, sha, key, options, limits, report)
    if cache_dir is not None:
        prepared.path = prepared_cache.store(Path(cache_dir), prepared, cache_max_bytes)
    report(1.0, "model prepared")
    return prepared


def _prepare(
    data: bytes,
    sha: str,
    key: str,
    options: PrepareOptions,
    limits: Limits,
    report: ProgressFn,
) -> PreparedModel:
    started = time.perf_counter()
    model = load_model(data, max_bytes=limits.max_bytes)
    check_node_limit(model, limits.max_nodes)
    warnings: list[str] = []
    model, reordered = sorted_model(model)
    if reordered:
        warnings.append("nodes were not in topological order; prepared in sorted order")
    header = model_header(model)
    user_model = onnx.ModelProto()
    user_model.CopyFrom(model)
    name_uniquely(user_model.graph.node)
    user_names = [n.name for n in user_model.graph.node]

    report(0.1, "binding input shapes")
    bindings = bind_inputs(user_model, options.input_shapes)
    bound = onnx.ModelProto()
    bound.CopyFrom(user_model)
    warnings += apply_input_shapes(bound, {b.name: b.shape for b in bindings})
    check_declared_sizes(bound, limits.max_tensor_elements)
    report(0.2, "inferring shapes")
    bound, inference_warnings = infer_shapes(bound, original=user_model)
    check_model(bound)

    report(0.4, "folding constants and shape arithmetic")
    prepared, tool, folded, fold_warnings = _fold(bound)
    _keep_scopes(user_model, prepared)
    warnings += fold_warnings
    report(0.7, "building the graph")
    if fold_warnings or not folded:
        warnings += inference_warnings
    # The protos and the IR hold millions of objects and no reference cycles: the cyclic
    # collector's passes over them were a third of a 100,000-node preparation. (Not paused
    # while onnxslim folds: its graph objects do hold cycles, and large arrays with them.)
    with collector_paused():
        graph = build_graph(prepared)
        check_tensor_sizes(graph, limits.max_tensor_elements)
        unknown = explain_unknown_shapes(graph)
        kept = {node.name for node in graph.nodes}
        user_nodes, folded_nodes = _name_map(user_names, kept)
    return PreparedModel(
        model=prepared,
        graph=graph,
        header=header,
        key=key,
        source_sha256=sha,
        report=PreparationReport(
            tool=tool,
            folded=folded,
            nodes_before=len(user_names),
            nodes_after=len(prepared.graph.node),
            seconds=round(time.perf_counter() - started, 4),
            inputs=tuple(bindings),
            defaults_used=any("default" in b.sources for b in bindings),
            unknown_shapes=tuple(unknown),
            warnings=tuple(warnings) + tuple(graph.warnings),
        ),
        user_nodes=user_nodes,
        folded_nodes=tuple(folded_nodes),
    )


def bind_inputs(model: onnx.ModelProto, given: Mapping[str, tuple[int, ...]]) -> list[InputBinding]:
    """A concrete shape for every input the caller feeds (see the module docstring).
    Inputs named in ``given`` must exist; their rank is checked when shapes are applied."""
    from engine.errors import ShapeError

    inputs = model_inputs(model)
    names = {v.name for v in inputs}
    unknown = [n for n in given if n not in names]
    if unknown:
        raise ShapeError(
            f"the model has no input '{unknown[0]}' (its inputs: {', '.join(sorted(names))})",
            hint="Name the inputs as the model does (see the analysis).",
        )
    symbols: dict[str, int] = {}
    # The user's shapes name sizes for symbols: bind those first so other inputs that
    # share a symbol (input_ids and attention_mask: "sequence") agree with them.
    for value in inputs:
        if value.name in given:
            declared, _ = type_spec(value.type)
            for dim, size in zip(declared or [], given[value.name], strict=False):
                if isinstance(dim, str) and dim and dim not in symbols:
                    symbols[dim] = size
    bindings = []
    for value in inputs:
        declared, dtype = type_spec(value.type)
        if value.name in given:
            shape = tuple(given[value.name])
            sources = tuple("user" for _ in shape)
            syms = tuple(
                d if isinstance(d, str) and d else None for d in (declared or [None] * len(shape))
            )
            if declared is not None and len(declared) == len(shape):
                sources = tuple(
                    "declared" if isinstance(d, int) and d == s else "user"
                    for d, s in zip(declared, shape, strict=True)
                )
            bindings.append(InputBinding(value.name, shape, dtype, sources, syms[: len(shape)]))
            continue
        if declared is None:
            raise _unknown_rank(value.name)
        shape_list, sources_list, syms_list = [], [], []
        for axis, dim in enumerate(declared):
            if isinstance(dim, int) and dim > 0:
                shape_list.append(dim)
                sources_list.append("declared")
                syms_list.append(None)
                continue
            symbol = dim if isinstance(dim, str) and dim else None
            if symbol is not None and symbol in symbols:
                size = symbols[symbol]
            else:
                size = DEFAULT_BATCH if axis == 0 else DEFAULT_DIM
                if symbol is not None:
                    symbols[symbol] = size
            shape_list.append(size)
            sources_list.append("default")
            syms_list.append(symbol)
        bindings.append(
            InputBinding(
                value.name, tuple(shape_list), dtype, tuple(sources_list), tuple(syms_list)
            )
        )
    return bindings


def _unknown_rank(name: str):
    from engine.errors import ShapeError

    return ShapeError(
        f"input '{name}' declares no shape (not even its rank), so it cannot be bound",
        hint=f'Give its shape, e.g. input shapes {{"{name}": [1, 3, 224, 224]}}.',
    )


def _fold(model: onnx.ModelProto) -> tuple[onnx.ModelProto, str, bool, list[str]]:
    """Fold with onnxslim where there is something to fold; shapes from onnxruntime's
    symbolic inference where onnxslim fails or leaves them unknown."""
    if not _foldable(model):
        return model, "onnx shape inference (nothing to fold)", False, []
    warnings: list[str] = []
    try:
        import onnxslim

        tool = f"onnxslim {onnxslim.__version__}"
        copy = onnx.ModelProto()
        copy.CopyFrom(model)  # onnxslim edits its input
        folded = onnxslim.slim(
            copy,
            size_threshold=MAX_FOLDED_BYTES,
            # No fusion (the analysis shows the model's own ops) and no tying of equal
            # weights (the parameter count stays the model's).
            skip_optimizations=["graph_fusion", "weight_tying"],
        )
        if folded is None:
            raise RuntimeError("onnxslim returned no model")
        # IR 3 demands every initializer be a graph input, which onnxslim undoes.
        folded.ir_version = max(folded.ir_version, 4)
        check_model(folded)
        folded, _ = infer_shapes(folded)
    except Exception as e:  # noqa: BLE001 - a third-party optimizer may fail in any way
        reason = " ".join(str(e).split())[:300] or type(e).__name__
        warnings.append(f"folding with onnxslim failed, the model is kept unfolded: {reason}")
        return _symbolic_shapes(model, warnings)
    if _has_unknown_shapes(folded):
        better, symbolic_tool, _, _ = _symbolic_shapes(folded, [])
        if not _has_unknown_shapes(better) or _unknown_count(better) < _unknown_count(folded):
            return better, f"{tool} + {symbolic_tool}", True, warnings
    return folded, tool, True, warnings


def _symbolic_shapes(
    model: onnx.ModelProto, warnings: list[str]
) -> tuple[onnx.ModelProto, str, bool, list[str]]:
    try:
        import onnxruntime
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

        inferred = SymbolicShapeInference.infer_shapes(model, auto_merge=True)
        if inferred is None:
            raise RuntimeError("no result")
        return (
            inferred,
            f"onnxruntime {onnxruntime.__version__} symbolic shape inference",
            False,
            warnings,
        )
    except Exception as e:  # noqa: BLE001 - the onnx shapes stand
        reason = " ".join(str(e).split())[:200] or type(e).__name__
        warnings.append(f"onnxruntime's symbolic shape inference failed too: {reason}")
        return model, "onnx shape inference", False, warnings


def _foldable(model: onnx.ModelProto) -> bool:
    """Whether some node computes only from constants, or reads a tensor's shape."""
    graph = model.graph
    constant = {i.name for i in graph.initializer}
    for node in graph.node:
        if node.op_type in _SHAPE_OPS:
            return True
        if node.op_type == "Constant":
            constant.update(node.output)
            continue
        inputs = [i for i in node.input if i]
        if inputs and all(i in constant for i in inputs):
            return True
    # Dead nodes and repeated subexpressions are folded too, but they cost nothing to keep.
    return False


def _has_unknown_shapes(model: onnx.ModelProto) -> bool:
    return _unknown_count(model) > 0


def _unknown_count(model: onnx.ModelProto) -> int:
    graph = model.graph
    known = {i.name for i in graph.initializer}
    count = 0
    typed = {v.name: v for v in (*graph.input, *graph.value_info, *graph.output)}
    for node in graph.node:
        for name in node.output:
            if not name or name in known:
                continue
            value = typed.get(name)
            dims = type_spec(value.type)[0] if value is not None else None
            if dims is None or not all(isinstance(d, int) for d in dims):
                count += 1
    return count


def _keep_scopes(user: onnx.ModelProto, prepared: onnx.ModelProto) -> None:
    """Folding drops the nodes' metadata: put the exporter's module scopes back on the
    nodes it kept (by name), for the graph view's groups."""
    scopes = {
        node.name: entry.value
        for node in user.graph.node
        for entry in node.metadata_props
        if entry.key == SCOPE_KEY
    }
    if not scopes:
        return
    for node in prepared.graph.node:
        value = scopes.get(node.name)
        if value is not None and not any(e.key == SCOPE_KEY for e in node.metadata_props):
            node.metadata_props.add(key=SCOPE_KEY, value=value)


def _name_map(
    user_names: list[str], kept: set[str]
) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    """Prepared node -> the user's node names; the user's nodes folded away."""
    user = set(user_names)
    mapping = {name: (name,) if name in user else () for name in kept}
    folded = [name for name in user_names if name not in kept]
    return mapping, folded


def _bytes(source: ModelSource) -> bytes:
    if isinstance(source, bytes):
        return source
    if isinstance(source, onnx.ModelProto):
        return source.SerializeToString()
    return read_model_file(source)


def _key(sha: str, options: PrepareOptions) -> str:
    """The cache key: the bytes and the input shapes (limits decide whether a model may be
    prepared, not what it becomes)."""
    text = json.dumps(
        {
            "version": PREPARE_VERSION,
            "onnx": onnx.__version__,
            "model": sha,
            "shapes": options.to_dict()["input_shapes"],
        },
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def op_counts(model: onnx.ModelProto) -> dict[str, int]:
    return dict(Counter(n.op_type for n in model.graph.node).most_common())


def _ignore(fraction: float, message: str) -> None:
    pass
