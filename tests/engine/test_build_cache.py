"""The build cache: a segment built before (same module, target, schedules and code) is
copied instead of compiled, its weights written afresh; anything a build reads that
changed misses; a damaged entry is built again; the cache keeps to its size."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper
from test_fusion_compile import FAST, conv_relu_conv

from engine.fusion import CompileConfig, build_cache, compile_model, segment_builds
from engine.fusion.build_cache import BuildCache
from engine.fusion.standalone import CompiledModel


def _compile(model, tmp_path, name: str, cache, **options):
    config = CompileConfig(str(tmp_path / name), build_cache=cache, **{**FAST, **options})
    return compile_model(model, config).to_dict()


def _run_artifact(tmp_path, name: str, x):
    return CompiledModel(tmp_path / name / "artifact", threads=1).run({"x": x})["y"]


def _reference(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(["y"], {"x": x})[0]


def _other_weights(model):
    """The same graph with every weight replaced: the same build, other parameters."""
    other = onnx.ModelProto()
    other.CopyFrom(model)
    rng = np.random.default_rng(7)
    for k, init in enumerate(other.graph.initializer):
        value = numpy_helper.to_array(init)
        fresh = (0.3 * rng.standard_normal(value.shape)).astype(value.dtype)
        other.graph.initializer[k].CopyFrom(numpy_helper.from_array(fresh + k, init.name))
    return other


def test_a_second_compile_copies_its_builds_and_runs_its_own_weights(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    model = conv_relu_conv()
    first = _compile(model, tmp_path, "a", str(cache))
    assert first["builds"] == {"cache": str(cache), "from_cache": 0, "not_in_cache": 1}
    assert len(list(cache.glob("*/*/built.json"))) == 1

    # the same graph, other weights: nothing is compiled, the weights are the new ones
    compiled = []  # builds run in forked children: counted where they are started
    real = segment_builds.forked.call_forked
    monkeypatch.setattr(
        segment_builds.forked, "call_forked", lambda *a, **k: compiled.append(a) or real(*a, **k)
    )
    other = _other_weights(model)
    second = _compile(other, tmp_path, "b", str(cache))
    assert second["builds"]["from_cache"] == 1 and second["builds"]["not_in_cache"] == 0
    assert not compiled and second["outputs_match"] is True
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    got = _run_artifact(tmp_path, "b", x)
    np.testing.assert_allclose(got, _reference(other, x), rtol=1e-4, atol=1e-4)
    assert not np.allclose(got, _reference(model, x), atol=1e-2)
    # the artifact is whole: every file the manifest lists is there, with its digest
    manifest = json.loads((tmp_path / "b" / "artifact" / "manifest.json").read_text())
    library = manifest["segments"][0]["library"]
    assert (tmp_path / "b" / "artifact" / library).read_bytes() == (
        tmp_path / "a" / "artifact" / library
    ).read_bytes()


def test_what_a_build_reads_changing_misses(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    model = conv_relu_conv()
    _compile(model, tmp_path, "a", str(cache))
    # another version of our lowering and schedules
    monkeypatch.setattr(build_cache, "code_version", lambda: "another version")
    assert _compile(model, tmp_path, "b", str(cache))["builds"]["not_in_cache"] == 1
    monkeypatch.undo()
    # another graph: a different middle operator
    assert (
        _compile(conv_relu_conv("Sigmoid"), tmp_path, "c", str(cache))["builds"]["not_in_cache"]
        == 1
    )
    # another target: the LLVM target names the cores its code runs on
    assert _compile(model, tmp_path, "d", str(cache), threads=2)["builds"]["not_in_cache"] == 1
    assert len(list(cache.glob("*/*/built.json"))) == 4


def test_a_damaged_entry_is_built_again_and_stored_afresh(tmp_path):
    cache = tmp_path / "cache"
    model = conv_relu_conv()
    _compile(model, tmp_path, "a", str(cache))
    (meta,) = cache.glob("*/*/built.json")
    meta.write_text("{damaged")
    again = _compile(model, tmp_path, "b", str(cache))
    assert again["builds"]["not_in_cache"] == 1 and again["outputs_match"] is True
    assert json.loads(meta.read_text())["format"] == 1  # stored again in its place
    # a library that is not the one stored (a disk error, a hand edit): built again
    (meta.parent / "build.so").write_bytes(b"\x7fELF")
    third = _compile(model, tmp_path, "c", str(cache))
    assert third["builds"]["not_in_cache"] == 1 and third["outputs_match"] is True
    assert _compile(model, tmp_path, "d", str(cache))["builds"]["from_cache"] == 1


def test_the_cache_keeps_to_its_size_least_recently_used_first(tmp_path):
    cache = BuildCache(tmp_path / "cache", max_bytes=10)
    for k, key in enumerate(("aa1", "bb2", "cc3")):
        entry = cache.directory / key[:2] / key
        entry.mkdir(parents=True)
        (entry / "build.so").write_bytes(b"x" * 6)
        (entry / "built.json").write_text("{}")
        os.utime(entry / "built.json", (time.time() - 100 + k, time.time() - 100 + k))
    stale = cache.directory / "dd" / ".dd4-abandoned"
    stale.mkdir(parents=True)
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    cache.prune()
    left = sorted(p.name for p in cache.directory.glob("*/*"))
    assert left == ["cc3"]  # the newest, within 10 bytes; the abandoned write removed


def test_the_key_covers_the_tuned_kernels_the_target_and_the_module():
    import tvm

    from engine.fusion import delegate
    from engine.fusion.build_cache import build_key
    from engine.fusion.lowering import fuse_tir
    from engine.fusion.segment_builds import fuse_all
    from engine.fusion.target import resolve_target

    spec = resolve_target("host", 1)

    def fused(model):
        (segment,) = fuse_all(
            delegate.partition(model, set()), spec, [n.name for n in model.graph.node]
        ).values()
        return segment

    seg = fused(conv_relu_conv())
    plain = build_key(seg, spec, None)
    assert build_key(fused(conv_relu_conv()), spec, None) == plain  # the same, built again
    assert build_key(fused(_other_weights(conv_relu_conv())), spec, None) == plain
    funcs = [
        f for f in fuse_tir(seg.fused, spec.tvm_target()).functions.values()
        if isinstance(f, tvm.tirx.PrimFunc)
    ]  # fmt: skip
    assert build_key(seg, spec, {"a kernel": funcs[0]}) != plain
    assert build_key(seg, spec, {"a kernel": funcs[0]}) != build_key(
        seg, spec, {"a kernel": funcs[1]}
    )
    assert build_key(seg, resolve_target("host", 2), None) != plain
    assert build_key(fused(conv_relu_conv("Sigmoid")), spec, None) != plain
