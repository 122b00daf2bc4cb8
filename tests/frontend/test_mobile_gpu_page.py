"""The mobile-GPU analysis on the profile card of a modeled phone: the waste figure as a
pure dict, the partitions, boundaries and findings as the page shows them."""

from __future__ import annotations

import numpy as np
import pytest
from django.template.loader import render_to_string
from onnx import TensorProto, helper, numpy_helper

from engine.graph.prepare import prepare_model
from engine.profiling.options import ProfileOptions
from engine.profiling.stage import run
from engine.targets.catalog import get_target
from frontend.figures.mobile_gpu import partition_rows, phwc4_waste_bars
from frontend.presenters import present
from tests.conftest import SQUEEZENET

PHONE = get_target("phone-snapdragon835")


def split_model():
    """conv (C=6) -> LRN (no GPU kernel) -> conv: two GPU partitions, two boundaries."""
    weights = [
        numpy_helper.from_array(np.ones(shape, np.float32), name)
        for name, shape in (("w1", (6, 4, 3, 3)), ("w2", (4, 6, 3, 3)))
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="c1", pads=[1, 1, 1, 1]),
        helper.make_node("LRN", ["a"], ["b"], name="lrn", size=3),
        helper.make_node("Conv", ["b", "w2"], ["y"], name="c2", pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "split",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 10, 10])],
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def predicted(model_path, **options) -> dict:
    prepared = prepare_model(model_path)
    return run(prepared, PHONE, ProfileOptions.from_dict(options), lambda f, m: None).to_dict()


@pytest.fixture
def split_result(tmp_path) -> dict:
    path = tmp_path / "split.onnx"
    path.write_bytes(split_model().SerializeToString())
    return predicted(path, unit="gpu")


def page(result: dict) -> str:
    context = present("profile", result)
    return render_to_string(context["template"], context)


def test_waste_bars_show_data_and_padding_labelled_predicted(split_result):
    section = split_result["mobile_gpu"]
    figure = phwc4_waste_bars(section)
    data, padding = figure["data"]
    assert padding["y"] == ["b", "a"]  # equal waste: execution order, largest on top
    assert padding["x"] == [10 * 10 * 2 * 4 / 1e6] * 2  # two zero channels of fp32
    assert data["x"] == [10 * 10 * 6 * 4 / 1e6] * 2
    assert [c[0] for c in padding["customdata"]] == [25.0, 25.0]
    title = figure["layout"]["title"]["text"]
    assert "predicted (layout rules of the TFLite GPU delegate" in title
    assert "opengl-es-3.1 on gpu" in title


def test_waste_bars_say_so_when_nothing_is_padded():
    figure = phwc4_waste_bars({"tensors": [], "api": "metal", "unit": "gpu"})
    assert figure["layout"]["annotations"][0]["text"].startswith("no padding")


def test_partition_rows_sum_the_bytes_crossing_each_partition(split_result):
    rows = partition_rows(split_result["mobile_gpu"])
    assert [(r["index"], r["first"], r["kernels"]) for r in rows] == [(1, "c1", 1), (2, "c2", 1)]
    assert (rows[0]["in_bytes"], rows[0]["out_bytes"]) == (0, 10 * 10 * 6 * 4)
    assert (rows[1]["in_bytes"], rows[1]["out_bytes"]) == (10 * 10 * 6 * 4, 0)


def test_the_profile_card_shows_partitions_boundaries_and_findings(split_result):
    html = page(split_result)
    assert 'id="mobile-gpu-partitions"' in html and 'id="mobile-gpu-boundaries"' in html
    assert "C=6 wastes 25% of the buffer" in html
    assert "&#x27;lrn&#x27; (LRN) runs on the CPU" in html
    assert "<dt>GPU partitions</dt><dd>2</dd>" in html
    assert 'id="fig-mobile-gpu-waste-data"' in html
    assert "predicted (layout rules of the TFLite GPU delegate" in html


def test_a_cpu_unit_says_why_there_is_no_analysis():
    result = predicted(SQUEEZENET, unit="cpu_big")
    html = page(result)
    assert "No mobile-GPU analysis: unit &#x27;cpu_big&#x27; is a cpu, not a GPU." in html
    assert "mobile_gpu_waste" not in present("profile", result)["figures"]
