"""The real topologies bundled with onnx, against their published figures."""

from __future__ import annotations

import pytest
from onnx_builders import LIGHT_DIR, LIGHT_MODELS, analysis_of


@pytest.mark.parametrize("path", LIGHT_MODELS, ids=lambda p: p.stem)
def test_every_light_model_analyzes_fully(path):
    analysis = analysis_of(path)
    assert analysis.not_costed == []
    assert analysis.macs > 0 and analysis.params > 0
    assert [s.shape for s in analysis.inputs] == [[1, 3, 224, 224]]


def test_resnet50_matches_the_canonical_figures():
    analysis = analysis_of(LIGHT_DIR / "light_resnet50.onnx")
    # 25.557 M (torchvision) + 53,120 BN running statistics that Caffe2 stores as weights
    assert analysis.params == 25_610_152
    assert analysis.params == pytest.approx(25.56e6, rel=0.01)
    assert analysis.macs == pytest.approx(4.1e9, rel=0.03)
    assert analysis.ops["Conv"] == 53


def test_squeezenet_params():
    assert analysis_of(LIGHT_DIR / "light_squeezenet.onnx").params == pytest.approx(
        1.24e6, rel=0.01
    )
