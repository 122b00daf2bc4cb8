"""The on-disk cache of prepared models stays within its size, dropping the least recently
used preparations first, and never one that is in use."""

from __future__ import annotations

import os
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

from engine.graph import prepared_cache
from engine.graph.prepare import prepare_model


def _model(scale: float) -> onnx.ModelProto:
    """A small model whose bytes differ with ``scale`` (a different cache key each)."""
    w = onnx.numpy_helper.from_array(np.full((64, 64), scale, dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _age(directory, key: str, seconds: float) -> None:
    """Make the entry under ``key`` look last used ``seconds`` ago."""
    then = time.time() - seconds
    for path in directory.glob(f"{key}.*"):
        os.utime(path, (then, then))


def _keys(directory) -> set[str]:
    return {p.stem for p in directory.glob("*.onnx")}


def test_the_cache_keeps_to_its_size_least_recently_used_first(tmp_path):
    cache = tmp_path / "prepared"
    first = prepare_model(_model(1.0), cache_dir=cache)
    second = prepare_model(_model(2.0), cache_dir=cache)
    entry = sum(p.stat().st_size for p in cache.glob(f"{first.key}.*"))
    _age(cache, first.key, 600)
    _age(cache, second.key, 300)
    # the older entry is read again: it becomes the most recently used
    assert prepare_model(_model(1.0), cache_dir=cache).key == first.key
    third = prepare_model(_model(3.0), cache_dir=cache, cache_max_bytes=int(2.5 * entry))
    assert _keys(cache) == {first.key, third.key}  # the second, least recently used, went
    assert not list(cache.glob(f"{second.key}.*"))  # both of its files
    # what was dropped is prepared again, not an error
    again = prepare_model(_model(2.0), cache_dir=cache, cache_max_bytes=int(2.5 * entry))
    assert again.key == second.key and again.model.graph.node


def test_an_entry_in_use_or_just_written_is_never_dropped(tmp_path):
    cache = tmp_path / "prepared"
    used = prepare_model(_model(1.0), cache_dir=cache)  # written now: in use
    new = prepare_model(_model(2.0), cache_dir=cache, cache_max_bytes=1)
    assert _keys(cache) == {used.key, new.key}  # over its size, but nothing may go yet
    _age(cache, used.key, 2 * prepared_cache.IN_USE_S)
    assert prepared_cache.prune(cache, 1, keep=new.key) > 0
    assert _keys(cache) == {new.key}


def test_a_temporary_file_a_killed_worker_left_is_removed(tmp_path):
    cache = tmp_path / "prepared"
    kept = prepare_model(_model(1.0), cache_dir=cache)
    fresh, stale = cache / ".x.onnx.fresh", cache / ".x.onnx.stale"
    for path in (fresh, stale):
        path.write_bytes(b"\0" * 100)
    then = time.time() - 2 * prepared_cache.STALE_TEMP_S
    os.utime(stale, (then, then))
    prepared_cache.prune(cache, 1 << 30)
    assert fresh.exists() and not stale.exists()  # one may still be being written
    assert _keys(cache) == {kept.key}
