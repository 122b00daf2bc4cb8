"""Models and NN-Stretch plans the NN-Stretch tests share, each built once per process.

MobileNetV2 and EfficientNet-B0 are the zoo's onnx.helper builds of the published
architectures (torchvision's layout, seeded random weights): the MobileNet- and
EfficientNet-style models the paper branches."""

from __future__ import annotations

import functools

from engine.graph.prepare import prepare_model
from engine.partition.nnstretch import plan_nnstretch
from engine.partition.nnstretch.pricing import TargetPricer
from engine.partition.nnstretch.search import StretchOptions, run_search
from engine.partition.nnstretch.structure import detect_stages
from engine.targets import get_target
from engine.zoo import build

PHONE = "phone-snapdragon835"
DEFAULT = StretchOptions()
RELAXED = StretchOptions(alpha=1.0, min_meet=1)
"""Options under which GPU branches survive Eq. 4 on the phone (one meeting point, where
the 1 ms-per-transfer link assumption is amortised): designs with communication."""


@functools.cache
def prepared(name: str, resolution: int = 224):
    return prepare_model(build(name) if resolution == 224 else _small(name, resolution))


def _small(name: str, resolution: int):
    from engine.zoo.efficientnet import build_efficientnet_b0
    from engine.zoo.mobilenet import build_mobilenet_v2

    return {"mobilenet_v2": build_mobilenet_v2, "efficientnet_b0": build_efficientnet_b0}[name](
        resolution=resolution
    )


@functools.cache
def structure(name: str):
    return detect_stages(prepared(name).graph)


@functools.cache
def search(name: str, options: StretchOptions = DEFAULT):
    """``(search result, pricer)`` of ``name`` on the phone."""
    graph = prepared(name).graph
    pricer = TargetPricer(get_target(PHONE), graph)
    return run_search(structure(name), graph, pricer, options), pricer


@functools.cache
def phone_plan(name: str = "mobilenet_v2", options: StretchOptions = DEFAULT) -> dict:
    p = prepared(name)
    return plan_nnstretch(p.graph, p.model, get_target(PHONE), options)
