"""Validating an uploaded ONNX file: the cheap checks the web upload runs before it keeps
the file, and the header the upload shows."""

from __future__ import annotations

import os

from engine.errors import EngineError, InvalidModelError
from engine.graph.loader import (
    ModelHeader,
    check_model,
    check_node_limit,
    load_model,
    model_header,
)
from engine.graph.shapes import check_declared_sizes
from engine.graph.topology import sorted_model


def read_header(
    path: str | os.PathLike,
    *,
    max_bytes: int | None = None,
    max_nodes: int | None = None,
    max_tensor_elements: int | None = None,
) -> ModelHeader:
    """Validate an uploaded ONNX file and return its header.

    Checks that the file exists, is not empty, fits ``max_bytes``, parses as an ONNX
    model with at least one node (and at most ``max_nodes``), has no external data, a
    known opset, no cycle and no input that nothing produces, no declared tensor over
    ``max_tensor_elements``, and passes ``onnx.checker.check_model``. Raises
    :class:`InvalidModelError`, :class:`ModelLimitError` or :class:`UnsupportedModelError`,
    and nothing else: whatever onnx's parser or checker raises on a stranger's file (a
    string field that is not UTF-8 made the checker raise UnicodeDecodeError; found by
    tests/engine/test_ingestion_fuzz.py) is an :class:`InvalidModelError` with its reason.
    """
    try:
        model = load_model(path, max_bytes=max_bytes)
        if max_nodes is not None:
            check_node_limit(model, max_nodes)
        model, _ = sorted_model(model)
        if max_tensor_elements is not None:
            check_declared_sizes(model, max_tensor_elements)
        check_model(model)
        return model_header(model)
    except EngineError:
        raise
    except RecursionError:
        raise InvalidModelError(
            "the model is nested too deeply to check (subgraphs within subgraphs)",
            hint="Check that the file is the model you meant to upload.",
        ) from None
    except Exception as e:  # noqa: BLE001 - see the docstring
        raise InvalidModelError(
            f"the model could not be checked: {type(e).__name__}: {str(e)[:200]}",
            hint="Check that the file is a valid ONNX model (onnx.checker.check_model).",
        ) from e
