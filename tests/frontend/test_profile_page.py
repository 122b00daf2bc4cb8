"""The measured profile's card states how the runs were taken, the memory-bound kernels'
time block by block, and every warning of the profile."""

from __future__ import annotations

from django.template.loader import render_to_string

from engine.profiling.nodes import NodeProfileConfig, profile_nodes
from frontend.presenters import present
from tests.conftest import SQUEEZENET


def page(result: dict) -> str:
    context = present("profile", result)
    return render_to_string(context["template"], context)


def test_the_card_shows_memory_bound_kernels_and_the_profile_warnings():
    config = NodeProfileConfig(window_s=0.2, min_runs=5, threads=1)
    result = profile_nodes(SQUEEZENET, config).to_dict()
    memory = result["stability"]["memory_bound"]
    assert memory["memory_kernels"] >= 1 and memory["compute_kernels"] >= 1
    memory.update(memory_block_ms=[0.25, 0.25, 0.34], memory_spread_pct=36.0)
    result["warnings"].append("other processes competed for memory bandwidth while profiling")
    result["profiled_model"] = "the model as uploaded, inputs at the bound shapes"
    html = page(result)
    assert "Timed: the model as uploaded, inputs at the bound shapes." in html
    assert f"Memory-bound kernels ({memory['memory_kernels']}," in html
    assert "block by block: 0.25, 0.25, 0.34 ms (36% apart" in html
    assert '<p class="warning">other processes competed for memory bandwidth' in html


def test_a_tvm_build_without_kernels_says_so_instead_of_an_empty_table():
    result = profile_nodes(SQUEEZENET, NodeProfileConfig(window_s=0.1, min_runs=3)).to_dict()
    result["tvm_kernels"] = {"kernels": [], "fallback_nodes": ["conv1", "relu1"]}
    html = page(result)
    assert "The TVM build has no kernel to time (2 nodes run in onnxruntime" in html
    assert 'data-table="tvm-kernels"' not in html
