"""Graph IR: execution order, names, undefined inputs, cycles, subgraphs, params."""

from __future__ import annotations

import gc
import heapq
import random

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import LIGHT_MODELS, analysis_of, build, weight

from engine.errors import InvalidModelError
from engine.graph import analyze_model, read_header
from engine.graph.ir import Tensor, build_graph, collector_paused
from engine.graph.topology import execution_order


def test_unsorted_nodes_are_analyzed_in_topological_order(save):
    nodes = [
        helper.make_node("Relu", ["b"], ["y"], name="last"),
        helper.make_node("Neg", ["a"], ["b"], name="middle"),
        helper.make_node("Abs", ["x"], ["a"], name="first"),
    ]
    model = build(nodes, [("x", [4])], [("y", [4])])
    analysis = analyze_model(model)
    assert [n.name for n in analysis.node_list] == ["first", "middle", "last"]
    assert "nodes were not in topological order; analyzed in sorted order" in analysis.warnings
    assert analysis.flops == 12  # shapes were inferred along the sorted order
    assert read_header(save(model)).node_count == 3


def test_branches_keep_file_order_when_already_sorted():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="a"),
        helper.make_node("Neg", ["x"], ["b"], name="b"),
        helper.make_node("Add", ["a", "b"], ["y"], name="join"),
    ]
    analysis = analyze_model(build(nodes, [("x", [4])], [("y", [4])]))
    assert [n.name for n in analysis.node_list] == ["a", "b", "join"]
    graph = analysis.graph
    assert graph.tensors["x"].consumers == ["a", "b"]
    assert graph.tensors["y"].producer == "join"


def test_unnamed_nodes_get_unique_names():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Relu", ["a"], ["b"], name="Relu_1"),  # collides with a synthesized name
        helper.make_node("Relu", ["b"], ["y"]),
    ]
    analysis = analyze_model(build(nodes, [("x", [4])], [("y", [4])]))
    assert [n.name for n in analysis.node_list] == ["Relu_0", "Relu_1", "Relu_2"]
    nodes[2].name = ""
    nodes[0].name = "Relu_2"
    analysis = analyze_model(build(nodes, [("x", [4])], [("y", [4])]))
    assert [n.name for n in analysis.node_list] == ["Relu_2", "Relu_1", "Relu_2_1"]


def test_undefined_input_names_node_and_tensor(save):
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")]
    model = build(nodes, [("x", [4])], [("y", [4])])
    expected = "node 'adder' \\(Add\\) reads tensor 'ghost', which no node produces"
    with pytest.raises(InvalidModelError, match=expected):
        analyze_model(model)
    with pytest.raises(InvalidModelError, match=expected):
        read_header(save(model))


def test_cycle_names_the_nodes_in_it():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="entry"),
        helper.make_node("Add", ["a", "d"], ["b"], name="n1"),
        helper.make_node("Relu", ["b"], ["c"], name="n2"),
        helper.make_node("Neg", ["c"], ["d"], name="n3"),
        helper.make_node("Relu", ["c"], ["y"], name="exit"),
    ]
    model = build(nodes, [("x", [4])], [("y", [4])])
    with pytest.raises(InvalidModelError, match="cycle through nodes n1 -> n2 -> n3 -> n1"):
        analyze_model(model)


def test_control_flow_subgraphs_are_reported_and_their_outer_inputs_kept():
    def branch(name, op):
        out = helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [4])
        nodes = [
            helper.make_node(op, ["outer"], [f"{name}_tmp"]),
            helper.make_node("Relu", [f"{name}_tmp"], [f"{name}_out"]),
        ]
        return helper.make_graph(nodes, name, [], [out])

    nodes = [
        # The If reads "outer" only inside its branches; that still orders it after "make".
        helper.make_node(
            "If",
            ["cond"],
            ["y"],
            name="if",
            then_branch=branch("then", "Neg"),
            else_branch=branch("else", "Abs"),
        ),
        helper.make_node("Relu", ["x"], ["outer"], name="make"),
    ]
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    analysis = analyze_model(build(nodes, [("x", [4]), cond], [("y", [4])]))
    assert [n.name for n in analysis.node_list] == ["make", "if"]
    assert analysis.graph.nodes[1].subgraph_nodes == 4
    assert analysis.graph.tensors["outer"].consumers == ["if"]
    assert any(
        "'if' (If) holds control-flow subgraphs with 4 nodes" in w for w in analysis.warnings
    )
    assert analysis.not_costed == ["if"]


def test_params_counted_once_and_shape_constants_are_not_params():
    shape = numpy_helper.from_array(np.array([3, 4], dtype=np.int64), "w_shape")
    fill = helper.make_tensor("v", TensorProto.FLOAT, [1], [0.5])
    nodes = [
        helper.make_node("ConstantOfShape", ["w_shape"], ["w"], name="fill", value=fill),
        helper.make_node("MatMul", ["x", "w"], ["a"], name="mm1"),
        helper.make_node("MatMul", ["x", "w"], ["b"], name="mm2"),  # same weight again
        helper.make_node("Add", ["a", "b"], ["c"], name="add"),
        helper.make_node(
            "Constant",
            [],
            ["target"],
            name="const_shape",
            value=numpy_helper.from_array(np.array([2, 2, 2], np.int64)),
        ),
        helper.make_node("Reshape", ["c", "target"], ["y"], name="reshape"),
    ]
    analysis = analyze_model(
        build(nodes, [("x", [2, 3])], [("y", [2, 2, 2])], [shape, weight("unused", (100,))])
    )
    assert analysis.params == 12  # w only; int64 shapes and an unused initializer are not
    assert analysis.param_bytes == 48
    by_name = {n.name: n for n in analysis.node_list}
    assert by_name["mm1"].cost.params == by_name["mm2"].cost.params == 12
    assert analysis.not_costed == []
    # non-param produced tensors: a, b, c, y (float32, 8 each) + target (int64, 3)
    assert analysis.activation_bytes == 4 * 4 * 8 + 3 * 8


def _kahn_by_file_position(dependencies, outputs, defined):
    """The order as first specified: Kahn's algorithm, ready nodes by file position."""
    producer = {out: i for i, outs in enumerate(outputs) for out in outs if out}
    successors = [[] for _ in dependencies]
    indegree = [0] * len(dependencies)
    for i, names in enumerate(dependencies):
        for name in names:
            if name in producer:
                successors[producer[name]].append(i)
                indegree[i] += 1
            else:
                assert name in defined
    ready = [i for i, d in enumerate(indegree) if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for s in successors[i]:
            indegree[s] -= 1
            if indegree[s] == 0:
                heapq.heappush(ready, s)
    return order


@pytest.mark.parametrize("seed", range(20))
def test_execution_order_is_kahns_order_on_random_graphs(seed):
    rng = random.Random(seed)
    count = rng.randint(1, 60)
    # node k reads graph inputs and outputs of nodes before it in some valid order
    dependencies, outputs = [], []
    for k in range(count):
        pool = ["in0", "in1"] + [f"t{j}" for j in range(k)]
        dependencies.append(rng.sample(pool, rng.randint(1, min(3, len(pool)))))
        outputs.append([f"t{k}"])
    file_order = list(range(count))
    if seed % 2:  # half of the graphs are stored out of order
        rng.shuffle(file_order)
    deps = [dependencies[k] for k in file_order]
    outs = [outputs[k] for k in file_order]
    expected = _kahn_by_file_position(deps, outs, {"in0", "in1"})
    order = execution_order(deps, outs, ["in0", "in1"], lambda i: (f"n{i}", "Op"))
    assert order == expected
    if seed % 2 == 0:
        assert order == list(range(count))


def test_a_tensor_both_defined_and_produced_waits_for_its_producer():
    # "w" is an initializer and also the output of the second node: as before, the
    # producer is what the reader waits for.
    order = execution_order([["w"], ["x"]], [["y"], ["w"]], ["x", "w"], lambda i: (f"n{i}", "Op"))
    assert order == [1, 0]


def test_every_built_tensor_equals_one_built_by_its_constructor():
    graph = analysis_of(LIGHT_MODELS[0]).graph
    consumers = set()
    for tensor in graph.tensors.values():
        fresh = Tensor(
            tensor.name,
            tensor.shape,
            tensor.dtype,
            tensor.bytes,
            tensor.is_param,
            tensor.producer,
            list(tensor.consumers),
        )
        assert vars(tensor) == vars(fresh)
        consumers.add(id(tensor.consumers))
    assert len(consumers) == len(graph.tensors)  # tensors of one type share no list


def test_attribute_values_are_plain_python():
    small = numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "small")
    node = helper.make_node(
        "Custom",
        ["x"],
        ["y"],
        name="custom",
        domain="example",
        count=3,
        ratio=0.1,
        sizes=[1, 2],
        scales=[0.5, 0.25],
        mode="linear",
        names=["a", "b"],
        value=small,
    )
    model = build([node], [("x", [2])], [("y", [2])], domains=["example"])
    (built,) = build_graph(model).nodes
    assert built.attributes == {
        "count": 3,
        "ratio": np.float32(0.1).item(),
        "sizes": [1, 2],
        "scales": [0.5, 0.25],
        "mode": "linear",
        "names": ["a", "b"],
        "value": {"dtype": "float32", "shape": [2], "value": [1.0, 2.0]},
    }
    assert built.implicit_inputs == []


def test_collector_paused_restores_the_collectors_state():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
