"""The onnx package's node test cases: found in its data directory and read, and which
of them the suite does not compare (values it cannot compare, random outputs).

Each case is a one-operator model with inputs and expected outputs written by the ONNX
authors (``onnx/backend/test/data/node/<case>/model.onnx`` and
``test_data_set_0/{input,output}_<j>.pb``).

Some onnx wheels leave the data out; the cases are then generated in memory from the
same definitions (``onnx.backend.test.case.node``, which
``onnx.backend.test.cmd_tools generate-data`` writes to those files).
"""

from __future__ import annotations

import warnings
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from engine.accuracy.node_report import CaseResult, case_result

NODE_DATA_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"
RANDOM_OPS = frozenset(
    {
        "Bernoulli",
        "Multinomial",
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
    }
)


@dataclass(frozen=True)
class NodeCase:
    """One test case: a model, its inputs (by graph input) and the expected outputs."""

    name: str
    model: onnx.ModelProto
    inputs: list
    outputs: list

    @property
    def op_type(self) -> str:
        return self.model.graph.node[0].op_type if self.model.graph.node else ""


def node_cases(
    root: str | Path | None = None, *, names: Collection[str] | None = None
) -> Iterator[NodeCase]:
    """The node test cases, sorted by name: from ``root`` (default: the installed onnx's
    data directory), or generated from onnx's case definitions when it has no data."""
    root = Path(root) if root is not None else NODE_DATA_DIR
    wanted = set(names) if names is not None else None
    if root.is_dir():
        for case_dir in sorted(p for p in root.iterdir() if (p / "model.onnx").is_file()):
            if wanted is None or case_dir.name in wanted:
                yield _read_case(case_dir)
        return
    for case in _generated_cases():
        if wanted is None or case.name in wanted:
            yield case


def precheck(case: NodeCase) -> CaseResult | None:
    """A skip for a case the suite does not compare (values that are not tensors, random
    outputs, an output without its expected value); ``None`` for every other case."""
    graph = case.model.graph
    for kind, values in (("input", graph.input), ("output", graph.output)):
        for value in values:
            which = value.type.WhichOneof("value")
            if which != "tensor_type":
                what = (which or "untyped").replace("_type", "")
                return case_result(
                    case, "skip", "", f"{what} {kind} '{value.name}' is not compared"
                )
    randoms = RANDOM_OPS & {n.op_type for n in graph.node}
    if randoms:
        return case_result(case, "skip", "", f"random outputs ({', '.join(sorted(randoms))})")
    if _training_dropout(case):
        return case_result(case, "skip", "", "random outputs (Dropout in training mode)")
    if len(case.outputs) != len(graph.output):
        return case_result(case, "skip", "", "the case has no expected value for every output")
    return None


def _training_dropout(case: NodeCase) -> bool:
    """A Dropout that draws its mask: training_mode fed as true and a ratio above 0."""
    fed = dict(zip((v.name for v in case.model.graph.input), case.inputs, strict=False))
    for node in case.model.graph.node:
        if node.op_type != "Dropout" or len(node.input) < 3 or not node.input[2]:
            continue
        training = fed.get(node.input[2])
        ratio = fed.get(node.input[1]) if node.input[1] else 0.5
        if training is not None and bool(np.asarray(training)) and np.asarray(ratio) != 0:
            return True
    return False


def _read_case(case_dir: Path) -> NodeCase:
    model = onnx.load(case_dir / "model.onnx")
    data = case_dir / "test_data_set_0"
    tensor_types = [v.type.HasField("tensor_type") for v in model.graph.input]
    inputs = [
        _read_tensor(p) if tensor_types[j] else None
        for j, p in enumerate(sorted(data.glob("input_*.pb"), key=_index))
    ]
    out_types = [v.type.HasField("tensor_type") for v in model.graph.output]
    outputs = [
        _read_tensor(p) if j < len(out_types) and out_types[j] else None
        for j, p in enumerate(sorted(data.glob("output_*.pb"), key=_index))
    ]
    return NodeCase(case_dir.name, model, inputs, outputs)


def _index(path: Path) -> int:
    return int(path.stem.rsplit("_", 1)[1])


def _read_tensor(path: Path) -> np.ndarray:
    tensor = onnx.TensorProto()
    tensor.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(tensor)


def _generated_cases() -> list[NodeCase]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the definitions overflow casts on purpose
        from onnx.backend.test.case import node

        collected = node.collect_testcases()
    cases = []
    for case in sorted(collected, key=lambda c: c.name):
        if not case.data_sets:
            continue
        inputs, outputs = case.data_sets[0]
        cases.append(NodeCase(case.name, case.model, _arrays(inputs), _arrays(outputs)))
    return cases


def _arrays(values) -> list:
    """As the data files hold them: tensors as arrays (numpy scalars too)."""
    return [
        numpy_helper.to_array(v)
        if isinstance(v, onnx.TensorProto)
        else np.asarray(v)
        if isinstance(v, np.generic | np.ndarray)
        else v
        for v in values
    ]
