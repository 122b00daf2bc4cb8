"""The branched model NN-Stretch exports: valid ONNX (checker, strict shape inference), runs
in onnxruntime with the original's output shape, every node annotated with its processor
and whether it is a meeting point, marked as needing retraining, weights initialised as
the result says (branches: the original's leading channels; restore convs: He-normal)."""

from __future__ import annotations

import functools

import numpy as np
import onnx
import onnxruntime as ort
from nnstretch_cases import PHONE, RELAXED, prepared, search, structure
from onnx import numpy_helper

from engine.partition.nnstretch.export import assemble, node_annotations, to_onnx
from engine.targets import get_target


@functools.cache
def exported(name: str = "mobilenet_v2", relaxed: bool = True):
    """The best design of the grid (relaxed: three branches, CPU, LITTLE and GPU) as ONNX."""
    result, pricer = search(name, RELAXED) if relaxed else search(name)
    design = result.grid[0]
    p = prepared(name)
    branched = assemble(p.graph, structure(name), design, pricer.home)
    model = to_onnx(branched, p.model, p.graph, structure(name).constants, {"test": True})
    return model, design, branched


def test_the_branched_model_is_valid_onnx():
    model, _, _ = exported()
    onnx.checker.check_model(model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    shapes = {v.name for v in inferred.graph.value_info}
    assert all(o in shapes or o in {x.name for x in model.graph.output}
               for n in model.graph.node for o in n.output)  # fmt: skip


def test_it_runs_in_onnxruntime_with_the_expected_output_shape():
    for name in ("mobilenet_v2", "efficientnet_b0"):
        model, _, _ = exported(name, relaxed=name == "mobilenet_v2")
        session = ort.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
        (y,) = session.run(None, {"input": x})
        assert y.shape == (1, 1000) and np.isfinite(y).all()


def test_every_node_says_its_processor_and_whether_it_is_a_meeting_point():
    model, design, _ = exported()
    notes = node_annotations(model)
    assert len(notes) == len(model.graph.node)
    units = {n["nnstretch.recommended_processor"] for n in notes.values()}
    assert units == set(design.units) == {"cpu_big", "cpu_little", "gpu"}
    meets = [name for name, n in notes.items() if n["nnstretch.is_meeting_point"] == "true"]
    assert meets == [f"meet.s{k}" for k in range(len(design.segments))]
    by_name = {n.name: n for n in model.graph.node}
    assert all(by_name[m].op_type == "Concat" for m in meets)
    # head, tail and meeting points on the home processor, each branch on its own
    for n in notes.values():
        if n["nnstretch.role"] in ("head", "tail", "meet"):
            assert n["nnstretch.recommended_processor"] == "cpu_big"
        else:
            branch = int(n["nnstretch.branch"])
            assert n["nnstretch.recommended_processor"] == design.units[branch]


def test_the_model_is_marked_as_needing_retraining():
    model, _, _ = exported()
    meta = {p.key: p.value for p in model.metadata_props}
    assert meta["nnstretch.needs_retraining"] == "true"
    assert "not trained" in meta["nnstretch.weights"] and "He-normal" in meta["nnstretch.weights"]


def test_branch_weights_are_the_originals_leading_channels():
    model, design, branched = exported()
    p = prepared("mobilenet_v2")
    original = {i.name: numpy_helper.to_array(i) for i in p.model.graph.initializer}
    weights = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    sliced = [w for w in branched.weights.values() if w.init == "slice"]
    assert sliced, "some branch is narrower than the original"
    for w in sliced:
        source = original[w.source]
        np.testing.assert_array_equal(weights[w.name], source[tuple(slice(0, d) for d in w.shape)])
    restores = [w for w in branched.weights.values() if w.init == "he_normal"]
    assert len(restores) == sum(len(c.branches) for c in design.segments)


def test_width_and_depth_of_each_branch_are_what_was_priced():
    model, design, _ = exported()
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in inferred.graph.value_info}  # fmt: skip
    nodes = {n.name: n for n in model.graph.node}
    for s, choice in enumerate(design.segments):
        for b, branch in enumerate(choice.branches):
            restore = nodes[f"restore.s{s}b{b}"]
            assert shapes[restore.input[0]][1] == branch.option.out_channels
            assert shapes[restore.output[0]][1] == branch.restore_channels
            convs = [n for n in model.graph.node if n.name.endswith(f".s{s}b{b}")
                     and n.op_type == "Conv" and n.name.endswith(f"_project.s{s}b{b}")]  # fmt: skip
            assert len(convs) == branch.option.blocks  # one projection per kept block


def test_the_planner_writes_the_file_and_checks_it_in_onnxruntime(tmp_path):
    from engine.partition.nnstretch import plan_nnstretch

    p = prepared("mobilenet_v2")
    plan = plan_nnstretch(p.graph, p.model, get_target(PHONE), workdir=str(tmp_path))
    path = tmp_path / plan["branched_model"]["file"]
    assert plan["_artifacts"] == {"optimized_onnx": str(path)} and path.exists()
    onnx.checker.check_model(onnx.load(path), full_check=True)
    check = plan["execution_check"]
    assert check["shapes_match"] and check["outputs"][0]["shape"] == [1, 1000]
