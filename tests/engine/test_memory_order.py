"""The memory-aware order search: lowers the peak on parallel branches, never raises it."""

from __future__ import annotations

import random

from onnx import helper
from onnx_builders import build, weight

from engine.graph import analyze_model
from engine.memory import LifetimeOptions, MemoryConfig, build_lifetimes, plan_memory, search_order

BRANCHES, WIDE, NARROW = 4, 64, 8


def inception_block():
    """x -> 4 branches (1x1 conv widening to 64 channels, Relu, 1x1 conv to 8) -> Concat.

    The file lists the branches breadth-first (every widening conv, then every Relu, then
    every narrowing conv), the order a naive exporter produces: all four wide tensors are
    alive at once. Finishing one branch before the next keeps only one.
    """
    convs, relus, narrows, weights = [], [], [], []
    for b in range(BRANCHES):
        convs.append(helper.make_node("Conv", ["x", f"wa{b}"], [f"a{b}"], name=f"wide{b}"))
        relus.append(helper.make_node("Relu", [f"a{b}"], [f"r{b}"], name=f"relu{b}"))
        narrows.append(helper.make_node("Conv", [f"r{b}", f"wb{b}"], [f"n{b}"], name=f"nar{b}"))
        weights += [weight(f"wa{b}", (WIDE, NARROW, 1, 1)), weight(f"wb{b}", (NARROW, WIDE, 1, 1))]
    concat = helper.make_node("Concat", [f"n{b}" for b in range(BRANCHES)], ["y"], axis=1)
    return build(
        [*convs, *relus, *narrows, concat],
        [("x", [1, NARROW, 16, 16])],
        [("y", [1, NARROW * BRANCHES, 16, 16])],
        weights,
    )


def test_order_search_lowers_the_peak_on_parallel_branches():
    graph = analyze_model(inception_block()).graph
    search, lifetimes = search_order(graph)
    wide, narrow = WIDE * 16 * 16 * 4, NARROW * 16 * 16 * 4
    # As listed, the first Relu runs with all four wide convs' outputs alive, plus its own.
    assert search.original_peak_bytes == (BRANCHES + 1) * wide
    # Branch by branch: the last Relu's input and output, and three finished branches.
    assert search.peak_bytes == 2 * wide + (BRANCHES - 1) * narrow
    assert search.gain_bytes == search.original_peak_bytes - search.peak_bytes > 0
    assert search.method != "original" and lifetimes.lower_bound() == search.peak_bytes
    build_lifetimes(graph, search.order)  # the order is valid: it would raise otherwise
    report = plan_memory(graph).to_dict()
    assert report["order_gain_bytes"] == search.gain_bytes
    assert report["lower_bound_bytes"] == search.peak_bytes
    assert report["order"][0] == "wide0" and report["order"][1] == "relu0"


def test_order_search_keeps_the_original_when_nothing_is_better():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    graph = analyze_model(build(nodes, [("x", [4])], [("y", [4])])).graph
    search, _ = search_order(graph)
    assert search.method == "original" and search.order == [0, 1] and search.gain_bytes == 0


def random_dag(seed: int):
    """A random DAG of Relu, Concat (sizes add up) and ReduceMax (size 1) on 1-D tensors."""
    rng = random.Random(seed)
    nodes, sizes = [], {"x": 4}
    for i in range(30):
        a, b = rng.choice(list(sizes)), rng.choice(list(sizes))
        out, kind = f"t{i}", rng.random()
        if kind < 0.4 and sizes[a] + sizes[b] <= 1024:
            nodes.append(helper.make_node("Concat", [a, b], [out], axis=0))
            sizes[out] = sizes[a] + sizes[b]
        elif kind < 0.55:
            nodes.append(helper.make_node("ReduceMax", [a], [out], keepdims=1))
            sizes[out] = 1
        else:
            nodes.append(helper.make_node("Relu", [a], [out]))
            sizes[out] = sizes[a]
    read = {name for node in nodes for name in node.input}
    outputs = [(n, [sizes[n]]) for n in sizes if n not in read and n != "x"]
    return analyze_model(build(nodes, [("x", [4])], outputs)).graph


def test_order_search_never_raises_the_peak():
    for seed in range(15):
        graph = random_dag(seed)
        for in_place in (False, True):
            options = LifetimeOptions(in_place=in_place)
            search, lifetimes = search_order(graph, options)
            original = build_lifetimes(graph, None, options).lower_bound()
            assert search.original_peak_bytes == original
            assert search.peak_bytes <= original
            assert build_lifetimes(graph, search.order, options).lower_bound() == search.peak_bytes
            assert min(search.tried.values()) == search.peak_bytes


def test_order_search_can_be_switched_off():
    report = plan_memory(inception_block(), MemoryConfig(order_search=False)).to_dict()
    assert report["order_gain_bytes"] == 0 and report["order_method"] == "original"
    assert report["lower_bound_bytes"] == report["original_lower_bound_bytes"]
