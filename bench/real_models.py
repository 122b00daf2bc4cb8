"""The real-model set: ONNX files exported with ``torch.onnx.export`` the way people do today.

``python bench/real_models.py [--out DIR] [--only NAME ...] [--list]`` builds the set and
prints a table and the manifest's path. Tests and benchmarks call::

    from bench.real_models import MODELS, ensure_models, load_manifest
    paths = ensure_models()      # {name: Path of the .onnx}, building what is missing
    meta = load_manifest()       # {name: meta dict}

Every model comes from a ``transformers`` class built from a small config with seeded random
weights (nothing is downloaded), or from plain ``torch.nn`` where transformers has no class
(LSTM, GRU). Each is exported by the TorchScript exporter (``dynamo=False``) or the dynamo
exporter (``dynamo=True``), some with symbolic batch / sequence axes, at opset 18. The files
are what the exporters write: no simplification, no folding beyond the exporters' own
defaults, so the Shape -> Gather -> Concat -> Reshape arithmetic stays. Each is checked with
``onnx.checker`` and run once in onnxruntime before it is kept.

The MAC count in the manifest is independent of our ONNX analysis: ``FlopCounterMode`` on
the same eager forward pass at the export shapes (MACs = FLOPs / 2; it counts mm, addmm,
bmm, baddbmm and convolution, and the ops it counted are listed in ``mac_ops``). Two gaps in
its registry (torch 2.13) are filled: the CPU's fused attention kernel
(``_scaled_dot_product_flash_attention_for_cpu``, what ``sdpa`` runs on CPU) is counted as
the two batched matmuls it stands for, and the fused LSTM kernel, invisible to it, comes from
the formula ``4 * hidden * (input + hidden)`` per layer per step (``"mac_source":
"formula"``). The GRU runs through ``addmm`` and is counted.

The cache lives in ``$WORKBENCH_REAL_MODELS/<key>/`` (default root
``~/.cache/workbench/real-models``), ``<key>`` a hash of this file and the torch,
transformers and onnxscript versions, so a change to either rebuilds. Building holds an
``flock`` on the directory's lock file; each model is written to a temporary directory and
renamed into place, its JSON last, so a reader sees a model whole or not at all.

What the exporters needed (torch 2.13, transformers 5.23, onnxscript 0.7.2):

- TorchScript exporter: transformers 5 models take everything after ``input_ids`` as keyword
  arguments (traced positionally, BERT fails with "got multiple values for argument
  'use_cache'"), so every model is wrapped in ``_KeywordCall``, which passes the inputs by
  name and returns a plain tuple of tensors instead of a ``ModelOutput``.
- ``use_cache=False`` for GPT-2 (otherwise the past key/values become outputs).
- DETR: transformers 5 has no ``use_timm_backbone``; a ``ResNetConfig`` as
  ``backbone_config`` gives a backbone built by transformers itself, no timm needed.
- The dynamo exporter specialises a dimension whose example size is 1 (0/1
  specialisation), so models with a symbolic batch are exported at batch 2.
- ``external_data=False``: the dynamo exporter otherwise writes the weights beside the model
  in a ``.onnx.data`` file; one self-contained file is what the workbench uploads.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # engine, when run as a script

OPSET = 18
MAX_IR_VERSION = 10  # what the workbench's loaders and onnxruntime 1.31 all read
MANIFEST = "manifest.json"
_BUILD_PACKAGES = ("torch", "transformers", "onnxscript")


@dataclass(frozen=True)
class RealModel:
    """One model of the set: how to build it and how to export it."""

    name: str
    family: str
    exporter: str  # "torchscript" | "dynamo"
    build: Callable[[], Example]
    # input or output name -> {axis: symbol}; empty for a static export
    dynamic: Mapping[str, Mapping[int, str]] = field(default_factory=dict)


@dataclass
class Example:
    """A module in eval mode and the inputs it is exported (and counted) at."""

    module: Any
    inputs: dict[str, Any]  # name -> torch.Tensor, in the forward's order
    outputs: tuple[str, ...]
    int_ranges: dict[str, tuple[int, int]] = field(default_factory=dict)  # [low, high)
    formula_macs: dict[str, int] = field(default_factory=dict)  # ops FlopCounterMode misses


# ---------------------------------------------------------------- builders (torch inside)


def _keyword_call(model: Any, input_names: Iterable[str], output_keys: Iterable[str]) -> Any:
    """Wrap a transformers model: positional tensors in, keyword call, plain tuple out."""
    import torch

    names, keys = tuple(input_names), tuple(output_keys)

    class _KeywordCall(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args):
            out = self.model(**dict(zip(names, args, strict=True)))
            return tuple(out[key] for key in keys)

    return _KeywordCall().eval()


def _transformers_example(
    model: Any,
    inputs: dict[str, Any],
    outputs: tuple[str, ...],
    int_ranges: dict[str, tuple[int, int]] | None = None,
) -> Example:
    return Example(
        module=_keyword_call(model.eval(), inputs, outputs),
        inputs=inputs,
        outputs=outputs,
        int_ranges=int_ranges or {},
    )


def _text_inputs(batch: int, seq: int, vocab: int, names: Iterable[str]) -> tuple[dict, dict]:
    import torch

    inputs, ranges = {}, {}
    for name in names:
        if name == "input_ids":
            inputs[name], ranges[name] = torch.randint(0, vocab, (batch, seq)), (0, vocab)
        elif name == "attention_mask":
            inputs[name], ranges[name] = torch.ones(batch, seq, dtype=torch.int64), (1, 2)
        elif name == "token_type_ids":
            inputs[name], ranges[name] = torch.zeros(batch, seq, dtype=torch.int64), (0, 2)
    return inputs, ranges


def _image(batch: int, size: int) -> dict[str, Any]:
    import torch

    return {"pixel_values": torch.randn(batch, 3, size, size)}


def _bert(batch: int = 1) -> Example:
    import transformers

    config = transformers.BertConfig(
        vocab_size=8192,
        hidden_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=512,
        max_position_embeddings=512,
    )
    inputs, ranges = _text_inputs(
        batch, 128, config.vocab_size, ("input_ids", "attention_mask", "token_type_ids")
    )
    return _transformers_example(
        transformers.BertModel(config),
        inputs,
        ("last_hidden_state", "pooler_output"),
        ranges,
    )


def _gpt2(batch: int = 1) -> Example:
    import transformers

    config = transformers.GPT2Config(
        vocab_size=8192,
        n_positions=256,
        n_embd=128,
        n_layer=4,
        n_head=4,
        use_cache=False,
        bos_token_id=8191,
        eos_token_id=8191,
    )
    inputs, ranges = _text_inputs(batch, 64, config.vocab_size, ("input_ids", "attention_mask"))
    return _transformers_example(transformers.GPT2LMHeadModel(config), inputs, ("logits",), ranges)


def _vit(batch: int = 1) -> Example:
    import transformers

    config = transformers.ViTConfig(
        image_size=112,
        patch_size=16,
        hidden_size=192,
        num_hidden_layers=4,
        num_attention_heads=3,
        intermediate_size=768,
        num_labels=100,
    )
    return _transformers_example(
        transformers.ViTForImageClassification(config), _image(batch, 112), ("logits",)
    )


def _swin() -> Example:
    import transformers

    config = transformers.SwinConfig(
        image_size=112,
        patch_size=4,
        embed_dim=48,
        depths=[2, 2, 2],
        num_heads=[2, 4, 8],
        window_size=7,
    )
    return _transformers_example(
        transformers.SwinModel(config), _image(1, 112), ("last_hidden_state", "pooler_output")
    )


def _convnext() -> Example:
    import transformers

    config = transformers.ConvNextConfig(
        hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1], image_size=128
    )
    return _transformers_example(
        transformers.ConvNextModel(config), _image(1, 128), ("last_hidden_state", "pooler_output")
    )


def _scale_preserving(model: Any) -> Any:
    """Re-draw conv and linear weights with He initialisation (std sqrt(2 / fan_in)), biases
    0, and set batch norms to scale 1, shift 0. transformers draws conv weights from
    N(0, 0.02) for MobileNetV2 and EfficientNet (and EfficientNet's batch-norm scales too),
    and through their narrow layers the activations shrink to nothing: the MobileNetV2
    export's logits were 8e-24 at most and EfficientNet's outputs 2e-41, so every accuracy
    and compile check of those two compared zeros."""
    import torch

    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Conv2d | torch.nn.Linear):
                torch.nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
                if module.bias is not None:
                    module.bias.zero_()
            elif isinstance(module, torch.nn.BatchNorm2d):
                module.weight.fill_(1.0)
                module.bias.zero_()
    return model


def _mobilenet_v2() -> Example:
    import transformers

    config = transformers.MobileNetV2Config(depth_multiplier=0.5, image_size=128, num_labels=100)
    model = _scale_preserving(transformers.MobileNetV2ForImageClassification(config))
    return _transformers_example(model, _image(1, 128), ("logits",))


def _efficientnet() -> Example:
    import transformers

    config = transformers.EfficientNetConfig(
        image_size=128, width_coefficient=0.5, depth_coefficient=0.5, hidden_dim=640
    )
    return _transformers_example(
        _scale_preserving(transformers.EfficientNetModel(config)),
        _image(1, 128),
        ("last_hidden_state", "pooler_output"),
    )


def _resnet(batch: int = 1) -> Example:
    import transformers

    config = transformers.ResNetConfig(
        embedding_size=32,
        hidden_sizes=[32, 64, 128, 256],
        depths=[1, 1, 2, 1],
        layer_type="bottleneck",
    )
    return _transformers_example(
        transformers.ResNetModel(config), _image(batch, 128), ("last_hidden_state", "pooler_output")
    )


def _detr() -> Example:
    import transformers

    backbone = transformers.ResNetConfig(
        embedding_size=32,
        hidden_sizes=[32, 64, 128, 256],
        depths=[1, 1, 1, 1],
        layer_type="basic",
        out_features=["stage4"],
    )
    config = transformers.DetrConfig(
        backbone_config=backbone,
        num_queries=20,
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=256,
        decoder_ffn_dim=256,
        num_labels=20,
    )
    return _transformers_example(
        transformers.DetrForObjectDetection(config), _image(1, 128), ("logits", "pred_boxes")
    )


def _segformer(batch: int = 1) -> Example:
    import transformers

    config = transformers.SegformerConfig(
        hidden_sizes=[16, 32, 64, 128],
        depths=[1, 1, 1, 1],
        num_attention_heads=[1, 2, 4, 8],
        decoder_hidden_size=64,
        num_labels=19,
    )
    return _transformers_example(
        transformers.SegformerForSemanticSegmentation(config), _image(batch, 128), ("logits",)
    )


def _recurrent(kind: str, batch: int = 1, seq: int = 32) -> Example:
    """A 2-layer LSTM or GRU over a feature sequence, with a linear head on every step."""
    import torch

    input_size, hidden, layers = 64, 128, 2

    class _Tagger(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            rnn = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
            self.rnn = rnn(input_size, hidden, num_layers=layers, batch_first=True)
            self.head = torch.nn.Linear(hidden, 32)

        def forward(self, features):
            out, _ = self.rnn(features)
            return self.head(out)

    formula = {}
    if kind == "lstm":
        # per layer per step: 4 gates, each hidden x (layer input + hidden)
        per_step = 4 * hidden * (input_size + hidden) + 4 * hidden * (hidden + hidden)
        formula["aten.lstm"] = batch * seq * per_step
    return Example(
        module=_Tagger().eval(),
        inputs={"features": torch.randn(batch, seq, input_size)},
        outputs=("scores",),
        formula_macs=formula,
    )


def _axes(names: Iterable[str], axes: Mapping[int, str]) -> dict[str, dict[int, str]]:
    return {name: dict(axes) for name in names}


_BATCH_SEQ = {0: "batch", 1: "sequence"}
_BATCH = {0: "batch"}

MODELS: dict[str, RealModel] = {
    m.name: m
    for m in [
        RealModel(
            "bert_ts",
            "bert",
            "torchscript",
            _bert,
            _axes(
                ("input_ids", "attention_mask", "token_type_ids", "last_hidden_state"), _BATCH_SEQ
            )
            | _axes(("pooler_output",), _BATCH),
        ),
        RealModel(
            "bert_dynamo",
            "bert",
            "dynamo",
            lambda: _bert(batch=2),
            _axes(("input_ids", "attention_mask", "token_type_ids"), _BATCH_SEQ),
        ),
        RealModel(
            "gpt2_ts",
            "gpt2",
            "torchscript",
            _gpt2,
            _axes(("input_ids", "attention_mask", "logits"), _BATCH_SEQ),
        ),
        RealModel(
            "gpt2_dynamo",
            "gpt2",
            "dynamo",
            lambda: _gpt2(batch=2),
            _axes(("input_ids", "attention_mask"), _BATCH_SEQ),
        ),
        RealModel("vit_ts", "vit", "torchscript", _vit),
        RealModel(
            "vit_dynamo", "vit", "dynamo", lambda: _vit(batch=2), _axes(("pixel_values",), _BATCH)
        ),
        RealModel("swin_ts", "swin", "torchscript", _swin),
        RealModel("convnext_ts", "convnext", "torchscript", _convnext),
        RealModel("convnext_dynamo", "convnext", "dynamo", _convnext),
        RealModel("mobilenet_v2_ts", "mobilenet_v2", "torchscript", _mobilenet_v2),
        RealModel("efficientnet_ts", "efficientnet", "torchscript", _efficientnet),
        RealModel("resnet_ts", "resnet", "torchscript", _resnet),
        RealModel(
            "resnet_dynamo",
            "resnet",
            "dynamo",
            lambda: _resnet(batch=2),
            _axes(("pixel_values",), _BATCH),
        ),
        RealModel(
            "lstm_ts",
            "lstm",
            "torchscript",
            lambda: _recurrent("lstm"),
            _axes(("features", "scores"), _BATCH_SEQ),
        ),
        RealModel("gru_ts", "gru", "torchscript", lambda: _recurrent("gru")),
        RealModel("detr_ts", "detr", "torchscript", _detr),
        RealModel("segformer_ts", "segformer", "torchscript", _segformer),
        RealModel("segformer_dynamo", "segformer", "dynamo", _segformer),
    ]
}


# ---------------------------------------------------------------- export and measure


def _export(spec: RealModel, example: Example, path: Path) -> None:
    import torch

    args = tuple(example.inputs.values())
    names = list(example.inputs)
    if spec.exporter == "torchscript":
        torch.onnx.export(
            example.module,
            args,
            str(path),
            dynamo=False,
            opset_version=OPSET,
            input_names=names,
            output_names=list(example.outputs),
            dynamic_axes={k: dict(v) for k, v in spec.dynamic.items()} or None,
        )
        return
    dims: dict[str, Any] = {}
    dynamic_shapes = None
    if spec.dynamic:
        # _KeywordCall.forward takes *args: torch.export binds them all to "args"
        dynamic_shapes = {
            "args": tuple(
                {
                    axis: dims.setdefault(symbol, torch.export.Dim(symbol))
                    for axis, symbol in spec.dynamic.get(name, {}).items()
                }
                or None
                for name in names
            )
        }
    program = torch.onnx.export(
        example.module,
        args,
        dynamo=True,
        verbose=False,
        opset_version=OPSET,
        input_names=names,
        output_names=list(example.outputs),
        dynamic_shapes=dynamic_shapes,
        external_data=False,
    )
    program.save(str(path), external_data=False)


def _count_macs(example: Example) -> tuple[int, dict[str, int], str]:
    """MACs of one eager forward pass: FlopCounterMode's FLOPs / 2, plus the formula ops."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

    # The CPU's fused attention kernel is missing from FlopCounterMode's registry (torch
    # 2.13): count it as the two batched matmuls it stands for.
    def cpu_sdpa(query, key, value, *args, out_shape=None, **kwargs):
        return sdpa_flop_count(query, key, value)

    counter = FlopCounterMode(
        display=False,
        custom_mapping={torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: cpu_sdpa},
    )
    with torch.no_grad(), counter:
        example.module(*example.inputs.values())
    ops = {str(op): flops // 2 for op, flops in counter.get_flop_counts()["Global"].items()}
    ops.update(example.formula_macs)
    source = "formula" if example.formula_macs else "flop_counter"
    return sum(ops.values()), dict(sorted(ops.items())), source


def _at_default_binding(
    spec: RealModel, example: Example, macs: int
) -> tuple[dict[str, list[int]], int]:
    """The input shapes the workbench binds when the user gives none (symbolic axes: the
    batch to DEFAULT_BATCH, every other to DEFAULT_DIM; engine.graph.options), and the
    model's MACs counted again at those shapes: the independent figure the analysis of an
    upload with no option ticked is compared with."""
    import torch

    from engine.graph.options import DEFAULT_BATCH, DEFAULT_DIM

    shapes, inputs, scale = {}, {}, 1.0
    for name, tensor in example.inputs.items():
        shape = list(tensor.shape)
        for axis in spec.dynamic.get(name, {}):
            new = DEFAULT_BATCH if axis == 0 else DEFAULT_DIM
            if name == next(iter(example.inputs)):
                scale *= new / shape[axis]
            shape[axis] = new
        shapes[name] = shape
        if shape == list(tensor.shape):
            inputs[name] = tensor
        elif tensor.dtype.is_floating_point:
            inputs[name] = torch.randn(shape, dtype=tensor.dtype)
        else:
            low, high = example.int_ranges.get(name, (0, 2))
            inputs[name] = torch.randint(low, high, shape, dtype=tensor.dtype)
    if all(shapes[n] == list(t.shape) for n, t in example.inputs.items()):
        return shapes, macs
    # The formula ops (a fused LSTM) grow with batch x sequence, like their inputs.
    formula = {op: int(count * scale) for op, count in example.formula_macs.items()}
    again = Example(example.module, inputs, example.outputs, example.int_ranges, formula)
    return shapes, _count_macs(again)[0]


def _value_info(value: Any) -> dict[str, Any]:
    import onnx

    tensor = value.type.tensor_type
    shape = [d.dim_param if d.HasField("dim_param") else d.dim_value for d in tensor.shape.dim]
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name
    return {"name": value.name, "shape": shape, "dtype": dtype}


def _check_and_describe(spec: RealModel, example: Example, path: Path) -> dict[str, Any]:
    """Check the exported file and run it once in onnxruntime; return the file's facts."""
    import onnx
    import onnxruntime as ort

    onnx.checker.check_model(str(path))
    model = onnx.load(str(path))
    graph_inputs = [_value_info(v) for v in model.graph.input]
    graph_outputs = [_value_info(v) for v in model.graph.output]
    # What a caller may vary: the inputs' symbolic axes. The outputs keep the shapes the
    # exporter wrote, which for a static TorchScript export can hold names it made up
    # (EfficientNet's "Mullast_hidden_state_dim_0").
    dynamic_axes = {}
    for value in graph_inputs:
        axes = {str(i): d for i, d in enumerate(value["shape"]) if isinstance(d, str)}
        if axes:
            dynamic_axes[value["name"]] = axes
        wanted = {str(axis) for axis in spec.dynamic.get(value["name"], {})}
        if wanted - set(axes):
            raise RuntimeError(f"{spec.name}: the exporter made {value['name']} axes static")
    if model.ir_version > MAX_IR_VERSION:
        raise RuntimeError(f"{spec.name}: IR version {model.ir_version} > {MAX_IR_VERSION}")
    ops = Counter(node.op_type for node in model.graph.node)

    inputs = []
    for value in graph_inputs:
        tensor = example.inputs[value["name"]]
        spec_in = {"name": value["name"], "shape": list(tensor.shape), "dtype": value["dtype"]}
        if value["name"] in example.int_ranges:
            spec_in["low"], spec_in["high"] = example.int_ranges[value["name"]]
        inputs.append(spec_in)

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feeds = {name: tensor.numpy() for name, tensor in example.inputs.items()}
    session.run(None, feeds)
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        session.run(None, feeds)
        runs.append(time.perf_counter() - start)

    return {
        "opset": next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
        "ir_version": model.ir_version,
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "nodes": len(model.graph.node),
        "ops": dict(sorted(ops.items())),
        "bytes": path.stat().st_size,
        "inputs": inputs,
        "outputs": graph_outputs,
        "dynamic_axes": dynamic_axes,
        "ort_latency_ms_1thread": round(sorted(runs)[len(runs) // 2] * 1e3, 2),
    }


def build_model(spec: RealModel, out_dir: Path) -> dict[str, Any]:
    """Export one model into ``out_dir`` (``<name>.onnx``) and return its meta dict."""
    import torch

    torch.manual_seed(0)
    with torch.no_grad():
        example = spec.build()
    macs, mac_ops, mac_source = _count_macs(example)
    default_shapes, default_macs = _at_default_binding(spec, example, macs)
    path = out_dir / f"{spec.name}.onnx"
    start = time.perf_counter()
    # Both exporters warn at length about what they trace (TracerWarning, deprecation of
    # dynamo=False, pytree internals); the checks below decide whether the file is good.
    # The dynamo exporter also logs, on every export, each torchvision op it cannot register.
    registration = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registration.level
    registration.setLevel(logging.ERROR)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _export(spec, example, path)
    finally:
        registration.setLevel(level)
    export_s = time.perf_counter() - start
    facts = _check_and_describe(spec, example, path)
    return {
        "name": spec.name,
        "family": spec.family,
        "exporter": spec.exporter,
        "file": path.name,
        **facts,
        "params": sum(p.numel() for p in example.module.parameters()),
        "macs": macs,
        "default_shapes": default_shapes,
        "default_macs": default_macs,
        "mac_source": mac_source,
        "mac_ops": mac_ops,
        "export_s": round(export_s, 2),
    }


# ---------------------------------------------------------------- cache


def cache_key() -> str:
    """Short hash of this script and the exporting packages' versions."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for package in _BUILD_PACKAGES:
        try:
            version = metadata.version(package)
        except metadata.PackageNotFoundError:
            version = "absent"
        digest.update(f"\n{package}=={version}".encode())
    return digest.hexdigest()[:12]


def default_dir() -> Path:
    root = os.environ.get("WORKBENCH_REAL_MODELS")
    base = Path(root) if root else Path.home() / ".cache" / "workbench" / "real-models"
    return base / cache_key()


def _selected(names: Iterable[str] | None) -> list[str]:
    selected = list(MODELS) if names is None else list(names)
    unknown = [n for n in selected if n not in MODELS]
    if unknown:
        raise KeyError(f"unknown real model(s) {unknown}; known: {sorted(MODELS)}")
    return selected


def _missing(directory: Path, names: list[str]) -> list[str]:
    return [n for n in names if not (directory / f"{n}.json").is_file()]


@contextlib.contextmanager
def _locked(directory: Path):
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def ensure_models(
    names: Iterable[str] | None = None,
    directory: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Path]:
    """Return ``{name: path}`` for the requested models, exporting the ones not cached yet."""
    directory = Path(directory) if directory else default_dir()
    selected = _selected(names)
    if _missing(directory, selected):
        with _locked(directory):
            for name in _missing(directory, selected):  # another process may have built some
                if progress:
                    progress(name)
                with tempfile.TemporaryDirectory(dir=directory, prefix=".build-") as tmp:
                    meta = build_model(MODELS[name], Path(tmp))
                    os.replace(Path(tmp) / meta["file"], directory / meta["file"])
                    _write_json(directory / f"{name}.json", meta)
            _write_json(directory / MANIFEST, _collect(directory))
    return {name: directory / f"{name}.onnx" for name in selected}


def _collect(directory: Path) -> dict[str, Any]:
    models = {
        path.stem: json.loads(path.read_text())
        for path in sorted(directory.glob("*.json"))
        if path.name != MANIFEST
    }
    versions = {}
    for package in _BUILD_PACKAGES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[package] = metadata.version(package)
    return {"key": directory.name, "versions": versions, "models": models}


def load_manifest(directory: Path | None = None) -> dict[str, dict[str, Any]]:
    """``{name: meta}`` of the models built in ``directory`` (default: the cache)."""
    directory = Path(directory) if directory else default_dir()
    # Read the per-model files, not manifest.json: they are the completion markers, so a
    # build stopped between a model and the manifest leaves nothing out.
    models = _collect(directory)["models"]
    if not models:
        raise FileNotFoundError(f"no real models in {directory}: call ensure_models() first")
    return models


def example_feeds(meta: Mapping[str, Any], seed: int = 0) -> dict[str, Any]:
    """Seeded numpy inputs at the export shapes: integers in [low, high), floats ~ N(0, 1)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in meta["inputs"]:
        if "low" in spec:
            feeds[spec["name"]] = rng.integers(
                spec["low"], spec["high"], spec["shape"], dtype=spec["dtype"]
            )
        else:
            feeds[spec["name"]] = rng.standard_normal(spec["shape"]).astype(spec["dtype"])
    return feeds


# ---------------------------------------------------------------- command line


def _table(models: Mapping[str, Mapping[str, Any]]) -> str:
    rows = [("name", "exporter", "dynamic", "nodes", "MB", "MMACs", "mac source", "ort ms")]
    for meta in models.values():
        rows.append(
            (
                meta["name"],
                meta["exporter"],
                ",".join(sorted({s for a in meta["dynamic_axes"].values() for s in a.values()}))
                or "-",
                str(meta["nodes"]),
                f"{meta['bytes'] / 1e6:.1f}",
                f"{meta['macs'] / 1e6:.1f}",
                meta["mac_source"],
                f"{meta['ort_latency_ms_1thread']:.1f}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="build here instead of the cache directory")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="build only these models")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    args = parser.parse_args(argv)
    if args.list:
        for spec in MODELS.values():
            dynamic = "dynamic" if spec.dynamic else "static"
            print(f"{spec.name:20} {spec.family:14} {spec.exporter:12} {dynamic}")
        return 0
    directory = args.out or default_dir()
    start = time.perf_counter()
    try:
        ensure_models(
            args.only,
            directory,
            progress=lambda name: print(f"exporting {name}", file=sys.stderr, flush=True),
        )
    except KeyError as e:
        print(e.args[0], file=sys.stderr)
        return 2
    models = load_manifest(directory)
    selected = _selected(args.only)
    print(_table({n: models[n] for n in selected}))
    print(f"{len(selected)} models in {time.perf_counter() - start:.1f} s")
    print(directory / MANIFEST)
    return 0


if __name__ == "__main__":
    sys.exit(main())
