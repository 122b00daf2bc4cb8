"""Test models with seeded random weights that cover the papers' workloads.

``ZOO`` maps a model name to its builder, ``build(name)`` returns the
``onnx.ModelProto`` (IR version 10, opset 17: onnxruntime 1.31 loads it and
``onnx.checker`` accepts it). ``bench/build_models.py OUTDIR`` writes them all as files.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx

from engine.zoo.bert import build_bert
from engine.zoo.efficientnet import build_efficientnet_b0
from engine.zoo.inception import build_inception
from engine.zoo.lstm import build_lstm
from engine.zoo.mobilenet import build_mobilenet_v2
from engine.zoo.resnext import build_resnext_blocks
from engine.zoo.vgg import build_vgg16
from engine.zoo.vit import build_vit

ZOO: dict[str, Callable[..., onnx.ModelProto]] = {
    "bert_small": build_bert,
    "lstm": build_lstm,
    "mobilenet_v2": build_mobilenet_v2,
    "efficientnet_b0": build_efficientnet_b0,
    "resnext_blocks": build_resnext_blocks,
    "vit_small": build_vit,
    "inception": build_inception,
    "vgg16": build_vgg16,
}
"""Builder per model name; each takes ``seed`` (default 0) and returns a ModelProto."""


def build(name: str, seed: int = 0) -> onnx.ModelProto:
    """Build the zoo model ``name``; raises ``KeyError`` naming the known models."""
    try:
        builder = ZOO[name]
    except KeyError:
        raise KeyError(f"no zoo model '{name}' (known: {', '.join(ZOO)})") from None
    return builder(seed)


__all__ = ["ZOO", "build"]
