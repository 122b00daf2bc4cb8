"""TVM's static memory plan read back from its build, and ours on the same tensors."""

from __future__ import annotations

import pytest
from onnx import helper as onnx_helper

from engine.memory import MemoryConfig, plan_memory
from engine.memory.tvm import KERNEL_DOMAIN, tvm_comparison, tvm_memory  # noqa: E402
from tests.engine.onnx_builders import build, weight


def branchy_model():
    """Conv -> Relu feeding two parallel convs, concatenated, flattened, then a Gemm:
    FuseOps gives three conv+relu kernels, concat+flatten and a dense kernel."""
    make = onnx_helper.make_node
    nodes = [
        make("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
        make("Relu", ["c0"], ["r0"]),
        make("Conv", ["r0", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        make("Relu", ["c1"], ["r1"]),
        make("Conv", ["r0", "w2"], ["c2"]),
        make("Relu", ["c2"], ["r2"]),
        make("Concat", ["r1", "r2"], ["cat"], axis=1),
        make("Flatten", ["cat"], ["flat"]),
        make("Gemm", ["flat", "wg"], ["y"], transB=1),
    ]
    weights = [
        weight("w0", (8, 3, 3, 3)),
        weight("w1", (8, 8, 3, 3)),
        weight("w2", (8, 8, 1, 1)),
        weight("wg", (10, 16 * 16 * 16)),
    ]
    return build(nodes, [("x", [1, 3, 16, 16])], [("y", [1, 10])], weights)


def test_tvm_static_allocations_are_read_from_its_plan():
    found = tvm_memory(branchy_model())
    assert found.fallback_nodes == 0 and len(found.graphs) == 1
    assert found.storages >= 2 and found.static_bytes > 0
    graph = found.graphs[0]
    kernels = [n for n in graph.nodes if n.domain == KERNEL_DOMAIN]
    assert found.kernels == len(kernels) >= 4
    # Every kernel output has a size; the graph's output is the model's output.
    assert all(graph.tensors[o].bytes for n in graph.nodes for o in n.outputs)
    assert graph.tensors[graph.outputs[0]].static_shape == (1, 10)
    # The largest intermediate (16 channels x 16 x 16 floats) must fit in TVM's storages.
    assert found.static_bytes >= 16 * 16 * 16 * 4


def test_our_plan_of_the_same_tensors_is_valid_and_not_larger_than_tvms():
    found = tvm_memory(branchy_model())
    report = plan_memory(found.graphs[0], MemoryConfig(in_place=True, order_search=False))
    assert report.valid
    data = report.to_dict(plans=False)
    assert data["planners"][data["best"]] <= found.static_bytes


def test_comparison_reports_both_figures():
    compared = tvm_comparison(branchy_model())
    assert compared["tvm_static_bytes"] > 0
    assert compared["lower_bound_bytes"] <= compared["ours_bytes"] <= compared["tvm_static_bytes"]
    assert compared["ratio"] == pytest.approx(
        compared["ours_bytes"] / compared["tvm_static_bytes"], abs=1e-4
    )
    assert compared["ours_reordered_bytes"] <= compared["ours_bytes"]
    assert compared["tvm_pass"] == "relax.transform.StaticPlanBlockMemory"


def test_a_view_of_an_input_is_the_input_not_a_new_tensor():
    import numpy as np
    from onnx import numpy_helper

    make = onnx_helper.make_node
    shape = numpy_helper.from_array(np.array([4, 8], np.int64), "shape")
    model = build(
        [make("Reshape", ["x", "shape"], ["flat"]), make("MatMul", ["flat", "w"], ["y"])],
        [("x", [1, 4, 8])],
        [("y", [4, 3])],
        [shape, weight("w", (8, 3))],
    )
    compared = tvm_comparison(model)
    assert compared["tvm_static_bytes"] == compared["ours_bytes"] == 0
