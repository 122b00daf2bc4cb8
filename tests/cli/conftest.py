"""The command line runs in a plain Python process: no Django settings. Each test gets its
own prepared-model cache and build cache."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "engine"))


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_PREPARED_CACHE", str(tmp_path / "prepared"))
    monkeypatch.setenv("WORKBENCH_BUILD_CACHE", str(tmp_path / "builds"))


@pytest.fixture
def save(tmp_path):
    """Write a model (or raw bytes) to a file and return its path as text."""

    def write(model, name: str = "model.onnx") -> str:
        path = tmp_path / name
        path.write_bytes(model if isinstance(model, bytes) else model.SerializeToString())
        return str(path)

    return write
