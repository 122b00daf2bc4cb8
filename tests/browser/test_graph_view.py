"""The model graph explorer in headless Chromium, on the model page's graph tab: it draws,
hovering names a node or an edge's tensor, a click shows a node's details and neighbours,
a group expands (its level laid out and fetched on demand), search finds and jumps into
closed groups, the colour switches between categories and a value scale, zooming in turns
dots into op boxes, a row of the profile's op table selects its node and the other way
round; the prepared graph beside its compiled kernels, a selection on either side lighting
up its counterparts on the other; the upload's own graph beside the prepared one, linked
by node name; a run page fetching the model's stored levels; and a generated model of
50,400 nodes (named plainly, and named by module scopes) opens within 1 s, pans and zooms
at 30 frames per second or more, expands a group within 200 ms, and fits everything into
columns (measured here and kept in timings.json beside the screenshots)."""

from __future__ import annotations

import functools
import hashlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from playwright.sync_api import expect

from engine.graph import analyze_model
from engine.graph.analyze import analyze_prepared
from engine.graph.prepare import prepare_model
from frontend.figures.graph.levels import default_open
from frontend.figures.graph.payload import graph_tree_of
from tests.browser.conftest import keep_timings, screenshot
from tests.conftest import LIGHT_DIR, SQUEEZENET, wait_until
from tests.frontend.test_graph_figure import shown
from tests.workbench.test_compare import ENV
from workbench.graph_store import warm_graph
from workbench.models import OnnxModel, Run, StageResult, Status, Target
from workbench.uploads import store_model_file

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

RENDER_BUDGET_MS = 2000
# The budgets on the 50,400-node model: 1 s to the first view, 200 ms to expand a
# group, 30 frames per second. The first view sends and lays out only the levels it opens
# (250 kB gzipped instead of the whole graph's 1.5 MB); every figure is kept in
# timings.json.
FIRST_VIEW_MS = 1000
EXPAND_MS = 200
FRAMES_PER_S = 30
CHANNELS = 4


def generated_cnn(modules: int, scoped: bool = False) -> onnx.ModelProto:
    """Residual blocks (Conv-BN-Relu twice, Add) and inception-style modules (three
    branches, a pool, Concat back to CHANNELS channels), alternating. ``scoped`` names the
    nodes as torch's TorchScript exporter would (``/stage.3/block.7/c1/Conv``: twenty
    modules a stage), so that the view groups them by those scopes."""
    nodes, weights = [], []

    def named(tag: str, op: str) -> str:
        if not scoped:
            return f"{tag}_{op.lower()}"
        part = tag[len(f"m{m}") :].strip("_")  # m: the module being made
        inner = f"/{part}" if part else ""
        return f"/stage.{m // 20}/block.{m % 20}{inner}/{op}"

    def tensor(name: str, shape: tuple[int, ...]) -> str:
        weights.append(numpy_helper.from_array(np.full(shape, 0.01, np.float32), name))
        return name

    def conv_bn_relu(x: str, tag: str, c_in: int = CHANNELS, c_out: int = CHANNELS) -> str:
        w = tensor(f"{tag}_w", (c_out, c_in, 3, 3))
        stats = [tensor(f"{tag}_{s}", (c_out,)) for s in ("scale", "bias", "mean", "var")]
        nodes.append(
            helper.make_node("Conv", [x, w], [f"{tag}_c"], named(tag, "Conv"), pads=[1] * 4)
        )
        nodes.append(
            helper.make_node(
                "BatchNormalization", [f"{tag}_c", *stats], [f"{tag}_b"], named(tag, "BN")
            )
        )
        nodes.append(helper.make_node("Relu", [f"{tag}_b"], [f"{tag}_r"], named(tag, "Relu")))
        return f"{tag}_r"

    x = "input"
    m = 0
    for m in range(modules):
        if m % 2:
            branches = [conv_bn_relu(x, f"m{m}a", c_out=1), conv_bn_relu(x, f"m{m}b", c_out=1)]
            branches.append(conv_bn_relu(conv_bn_relu(x, f"m{m}c1", c_out=1), f"m{m}c2", 1, 1))
            pool = helper.make_node(
                "MaxPool",
                [x],
                [f"m{m}_p"],
                named(f"m{m}", "Pool"),
                kernel_shape=[3, 3],
                pads=[1] * 4,
            )
            nodes.append(pool)
            squeeze = conv_bn_relu(f"m{m}_p", f"m{m}d", c_out=1)
            nodes.append(
                helper.make_node(
                    "Concat", [*branches, squeeze], [f"m{m}_y"], named(f"m{m}", "Concat"), axis=1
                )
            )
        else:
            y = conv_bn_relu(conv_bn_relu(x, f"m{m}1"), f"m{m}2")
            nodes.append(helper.make_node("Add", [y, x], [f"m{m}_y"], named(f"m{m}", "Add")))
        x = f"m{m}_y"
    shape = [1, CHANNELS, 8, 8]
    graph = helper.make_graph(
        nodes,
        "generated_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)],
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


@functools.cache
def analysis_of(which: str) -> dict:
    if which == "densenet121":
        return analyze_model(LIGHT_DIR / "light_densenet121.onnx").to_dict()
    if which == "50k":
        return analyze_model(generated_cnn(modules=4200)).to_dict()  # 50,400 nodes
    if which == "50k-scoped":
        return analyze_model(generated_cnn(modules=4200, scoped=True)).to_dict()
    return analyze_model(generated_cnn(modules=180)).to_dict()


def add_model(owner, name: str, analysis: dict) -> OnnxModel:
    digest = hashlib.sha256(name.encode()).hexdigest()
    model = OnnxModel.objects.create(
        owner=owner,
        name=name,
        file=f"models/{digest}.onnx",
        sha256=digest,
        size_bytes=0,
        ir_version=10,
        node_count=analysis["nodes"],
        inputs=analysis["inputs"],
        outputs=analysis["outputs"],
        analysis=analysis,
    )
    warm_graph(model.pk)  # as the analyze stage does
    return model


@pytest.fixture
def densenet(user) -> OnnxModel:
    # Before the page fixture: Playwright's event loop then forbids the ORM in this thread.
    return add_model(user, "densenet121", analysis_of("densenet121"))


@pytest.fixture
def generated(user) -> OnnxModel:
    return add_model(user, "generated", analysis_of("generated"))


@pytest.fixture
def huge(user) -> OnnxModel:
    return add_model(user, "generated-50k", analysis_of("50k"))


@pytest.fixture
def huge_scoped(user) -> OnnxModel:
    return add_model(user, "generated-50k-scoped", analysis_of("50k-scoped"))


@pytest.fixture
def profiled(densenet) -> Run:
    """A run of DenseNet with a measured profile of every node."""
    run = Run.objects.create(
        owner=densenet.owner,
        model=densenet,
        target=Target.objects.get(name="host"),
        config={"stages": ["analyze", "profile"]},
        status=Status.SUCCEEDED,
    )
    ops = [
        {
            "name": n["name"],
            "op_type": n["op_type"],
            "latency_us": 1.0 + i % 7,
            "status": "ok",
            "flops": n["flops"],
            "bytes": n["bytes_read"] + n["bytes_written"],
        }
        for i, n in enumerate(densenet.analysis["node_list"])
    ]
    profile = {
        "measured": True,
        "unit": "cpu",
        "latency_ms": 12.0,
        "latency_runs": 10,
        "latency": {"p90": 13.0, "spread_pct": 2.0},
        "environment": ENV,
        "ops": ops,
    }
    for i, (stage, result) in enumerate({"analyze": densenet.analysis, "profile": profile}.items()):
        StageResult.objects.create(
            run=run, stage=stage, position=i, status=Status.SUCCEEDED, result=result
        )
    return run


@pytest.fixture
def page_errors(page) -> list:
    errors: list = []
    page.on("pageerror", lambda error: errors.append(error))
    page.on(
        "console",
        lambda m: errors.append(f"{m.text} {m.location.get('url')}") if m.type == "error" else None,
    )
    return errors


def sign_in(page, url: str) -> None:
    page.goto(url + "/accounts/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice-pass-123")
    page.click("button[type=submit]")
    page.wait_for_url(lambda u: "/accounts/login/" not in u)


def first_view(analysis: dict) -> tuple[dict, list[int]]:
    """The tree and what the first view draws: the items of the top level and of every
    group it opens (node v as v, group g as -(g + 1))."""
    tree = graph_tree_of(analysis)
    return tree, shown(tree, set(default_open(tree)))


def open_graph(page, url: str, model: OnnxModel, where: str = "#tab-graph") -> dict:
    """The model page's graph tab, or the graph's own page (``where="graph/"``)."""
    sign_in(page, url)
    page.goto(f"{url}/models/{model.pk}/{where}")
    graph = page.locator("#graph")
    expect(graph).to_have_attribute("data-ready", "1", timeout=30_000)
    return {
        "render_ms": int(graph.get_attribute("data-render-ms")),
        "since_navigation_ms": int(graph.get_attribute("data-ready-at-ms")),
        "page_received_ms": page.evaluate(
            "Math.round(performance.getEntriesByType('navigation')[0].responseEnd)"
        ),
        "data_received_ms": page.evaluate(
            "Math.round(performance.getEntriesByType('resource')"
            ".find(e => e.name.includes('/graph/') && e.name.endsWith('.json')).responseEnd)"
        ),
        "visible": int(graph.get_attribute("data-visible")),
    }


def drawn(page, name: str) -> bool:
    return bool(page.evaluate("name => window.workbenchGraph.locate(name)", name))


def point_at(page, name: str) -> dict:
    page.locator("#graph-plot").scroll_into_view_if_needed()
    position = page.evaluate("name => window.workbenchGraph.locate(name)", name)
    assert position, f"{name} is not drawn"
    return position


def click_node(page, name: str) -> None:
    position = point_at(page, name)
    page.mouse.click(position["x"], position["y"])


# A scripted gesture through the canvas's own handlers, one input per animation frame:
# frames per second over it, as requestAnimationFrame sees them.
GESTURE_FPS = """async ([kind, steps]) => {
  const canvas = document.querySelector("#graph-plot canvas");
  const box = canvas.getBoundingClientRect();
  const x = box.left + box.width / 2, y = box.top + box.height / 2;
  const pointer = (type, dx, dy) => canvas.dispatchEvent(new PointerEvent(type,
    { bubbles: true, pointerId: 7, clientX: x + dx, clientY: y + dy, buttons: 1 }));
  const times = [];
  if (kind === "pan") pointer("pointerdown", 0, 0);
  await new Promise(resolve => {
    let i = 0;
    function frame(t) {
      times.push(t);
      if (i++ === steps) return resolve();
      if (kind === "pan") pointer("pointermove", -6 * i, -4 * i);
      else canvas.dispatchEvent(new WheelEvent("wheel", { bubbles: true, cancelable: true,
        clientX: x, clientY: y, deltaY: i <= steps / 2 ? -40 : 40 }));
      requestAnimationFrame(frame);
    }
    requestAnimationFrame(frame);
  });
  if (kind === "pan") pointer("pointerup", -6 * steps, -4 * steps);
  const span = times[times.length - 1] - times[0];
  return Math.round(10000 * (times.length - 1) / span) / 10;
}"""


def test_densenet_graph_details_neighbours_groups_search_and_metric(
    densenet, web_server, page, page_errors
):
    analysis = densenet.analysis
    tree, shown = first_view(analysis)
    names, ops = tree["nodes"]["name"], tree["nodes"]["op_type"]
    innermost, parent = tree["nodes"]["group"], tree["groups"]["parent"]
    concats = [names[i] for i in shown if i >= 0 and ops[i] == "Concat"]
    closed = [-i - 1 for i in shown if i < 0]
    inside = {}  # a node in each closed group, which the view draws at the group
    for v in range(len(names)):
        for g in chain_of(innermost[v], parent):
            inside.setdefault(g, names[v])

    timing = open_graph(page, web_server, densenet)
    print(f"\ndensenet121 {analysis['nodes']} nodes: {timing}")
    assert timing["render_ms"] < RENDER_BUDGET_MS, timing
    assert timing["visible"] == len(shown) < len(names)  # it opens with groups closed
    expect(page.locator("#tab-graph")).to_have_attribute("aria-selected", "true")
    # One of each that the first view shows on screen.
    concat = next(name for name in concats if drawn(page, name))
    group = next(g for g in closed if drawn(page, inside[g]))

    # Hovering a node names it; clicking shows its figures, tensors and neighbours.
    position = point_at(page, concat)
    page.mouse.move(position["x"], position["y"])
    tooltip = page.locator("#graph-plot .graph-tooltip")
    expect(tooltip).to_contain_text(concat)
    expect(tooltip).to_contain_text("Concat")
    page.mouse.click(position["x"], position["y"])
    details = page.locator("#graph-details")
    expect(details.locator("h3")).to_have_text(concat)
    expect(details).to_contain_text("FLOPs")
    expect(details).to_contain_text("Inputs")
    producer = details.locator("ul.tensors").first.locator("button").first
    producer_name = producer.inner_text()

    # Clicking a group expands it in place.
    before = int(page.locator("#graph").get_attribute("data-visible"))
    click_node(page, inside[group])  # drawn at its closed group
    expect(details.locator("h3")).to_have_text(tree["groups"]["label"][group])
    expect(details.get_by_role("button", name="Collapse").first).to_be_visible()
    assert int(page.locator("#graph").get_attribute("data-visible")) > before

    # A neighbour's name in the panel jumps to that node.
    page.evaluate("name => window.workbenchGraph.jumpTo(name)", concat)  # moved by the expand
    click_node(page, concat)
    expect(details.locator("h3")).to_have_text(concat)
    details.get_by_role("button", name=producer_name).first.click()
    expect(details.locator("h3")).to_have_text(producer_name)

    # Zoomed in, ops are boxes with their attributes and edges carry tensor shapes;
    # hovering an edge gives its tensor's shape and size.
    graph = page.locator("#graph")
    page.evaluate("window.workbenchGraph.zoomTo(150)")
    expect(graph).to_have_attribute("data-detail", "boxes")
    # A Conv and its consumer a row below: the edge between them is straight.
    conv, consumer = next(
        (names[u], names[v])
        for v, producers in enumerate(tree["preds"])
        for u in producers
        if ops[u] == "Conv" and innermost[u] == innermost[v] >= 0
    )
    node = analysis["node_list"][names.index(conv)]
    size = node["output_bytes"][0]
    page.evaluate("name => window.workbenchGraph.jumpTo(name)", conv)  # opens its groups
    page.evaluate("window.workbenchGraph.zoomTo(150)")
    screenshot(page, "graph-boxes")
    a, b = point_at(page, conv), point_at(page, consumer)
    page.mouse.move((a["x"] + b["x"]) / 2, (a["y"] + b["y"]) / 2)
    expect(tooltip).to_contain_text(node["outputs"][0])
    expect(tooltip).to_contain_text("×".join(str(d) for d in node["output_shapes"][0]))
    expect(tooltip).to_contain_text(f"{size / 1e6:.2f} MB" if size >= 1e6 else "kB")

    # Search by op type counts the matches; Enter jumps to the first one.
    page.fill("#graph-search", "concat")
    expect(page.locator("#graph-search-status")).to_have_text(
        f"{analysis['ops']['Concat']} matches"
    )
    page.press("#graph-search", "Enter")
    expect(page.locator("#graph-search-status")).to_have_text(f"1 of {analysis['ops']['Concat']}")
    expect(details.locator(".op")).to_contain_text("Concat")

    # The colour switches between categories and a continuous value scale.
    legend = page.locator("#graph-legend")
    expect(legend).to_contain_text("Concat")
    page.select_option("#graph-metric", "flops")
    expect(legend.locator(".colorbar")).to_be_visible()
    expect(legend).to_contain_text("FLOPs (log scale)")
    expect(legend).to_contain_text("zero or unknown")
    page.select_option("#graph-metric", "op_type")
    expect(legend.locator(".colorbar")).to_have_count(0)
    assert not page_errors


def chain_of(g: int, parent: list[int]) -> list[int]:
    found = []
    while g >= 0:
        found.append(g)
        g = parent[g]
    return found


def test_the_profile_table_and_the_graph_select_each_other(profiled, web_server, page, page_errors):
    sign_in(page, web_server)
    page.goto(f"{web_server}/runs/{profiled.pk}/#tab-profile")
    graph = page.locator("#graph")
    expect(graph).to_have_attribute("data-ready", "1", timeout=30_000)
    expect(page.locator("#graph-metric")).to_have_value("latency_us")
    expect(page.locator("#graph-legend")).to_contain_text("latency, measured")
    # The run page fetches the model's stored levels as groups open, as the model page does.
    assert graph.get_attribute("data-levels").endswith("/levels.json")
    assert page.locator("#graph-data").count() == 0

    # A row of the op table lights its node up in the graph ...
    conv = next(n["name"] for n in profiled.model.analysis["node_list"] if n["op_type"] == "Conv")
    page.locator(f'#profile-ops tr[data-node="{conv}"] td').first.click()
    expect(page.locator("#graph-details h3")).to_have_text(conv)
    expect(page.locator(f'#profile-ops tr[data-node="{conv}"]')).to_have_class("linked")

    # ... and a node clicked in the graph lights its row up.
    relu = page.locator("#graph-details .neighbours button").last.inner_text()
    click_node(page, relu)
    expect(page.locator("#graph-details h3")).to_have_text(relu)
    expect(page.locator(f'#profile-ops tr[data-node="{relu}"]')).to_have_class("linked")
    expect(page.locator(f'#profile-ops tr[data-node="{conv}"]')).not_to_have_class("linked")
    assert not page_errors


def test_a_generated_model_of_2000_nodes_renders_collapsed_within_budget(
    generated, web_server, page, page_errors
):
    analysis = generated.analysis
    assert analysis["nodes"] > 2000
    timing = open_graph(page, web_server, generated)
    print(f"\ngenerated {analysis['nodes']} nodes: {timing}")
    assert timing["render_ms"] < RENDER_BUDGET_MS, timing
    assert timing["visible"] < analysis["nodes"] // 3

    # Everything expanded: every node is drawn.
    page.click("#graph-expand-all")
    graph = page.locator("#graph")
    expect(graph).to_have_attribute("data-visible", str(analysis["nodes"]))
    last = analysis["node_list"][-1]["name"]
    page.fill("#graph-search", last)
    page.press("#graph-search", "Enter")
    expect(page.locator("#graph-details h3")).to_have_text(last)
    assert not page_errors


def test_a_generated_model_of_50000_nodes_opens_within_1_s_pans_at_30_fps(
    huge, web_server, page, page_errors
):
    analysis = huge.analysis
    assert analysis["nodes"] >= 50_000
    timing = open_graph(page, web_server, huge, "graph/")
    graph = page.locator("#graph")
    figures = {
        "first_view_ms": timing["since_navigation_ms"],
        "page_received_ms": timing["page_received_ms"],
        "data_received_ms": timing["data_received_ms"],
        "draw_ms": timing["render_ms"],
    }

    figures["visible_at_first_view"] = int(graph.get_attribute("data-visible"))
    # Pan and zoom over the first view.
    figures["pan_fps_first_view"] = page.evaluate(GESTURE_FPS, ["pan", 90])
    figures["zoom_fps_first_view"] = page.evaluate(GESTURE_FPS, ["zoom", 60])

    # Expanding groups: the click, the level's fetch (laid out on the server if it was not
    # yet), the new view and its first frame; a level one click away from the first view
    # was laid out with it, one deeper is laid out on demand.
    expands = []
    first = analysis["node_list"][0]["name"]
    tree = graph_tree_of(analysis)
    closed = set(chain_of(tree["nodes"]["group"][0], tree["groups"]["parent"]))
    closed -= set(default_open(tree))
    assert len(closed) >= 2
    for _depth in closed:  # e.g. a block, a module in it, a chain in that
        items = int(graph.get_attribute("data-visible"))
        page.evaluate("name => window.workbenchGraph.centreOn(name)", first)
        click_node(page, first)  # drawn at its outermost closed group
        wait_until(
            lambda items=items: int(graph.get_attribute("data-visible")) > items,
            timeout_s=10,
            what="expand",
        )
        expands.append(int(graph.get_attribute("data-expand-ms")))
    figures["expand_ms"] = max(expands)
    figures["expand_ms_each"] = expands

    # Pan and zoom over everything expanded, near (dots), nearer (boxes), and all in view.
    page.click("#graph-expand-all")
    expect(graph).to_have_attribute("data-visible", str(analysis["nodes"]), timeout=90_000)
    figures["expand_all_ms"] = int(graph.get_attribute("data-expand-all-ms"))
    page.evaluate("window.workbenchGraph.zoomTo(20)")
    figures["pan_fps_dots"] = page.evaluate(GESTURE_FPS, ["pan", 90])
    figures["zoom_fps_dots"] = page.evaluate(GESTURE_FPS, ["zoom", 60])
    page.evaluate("window.workbenchGraph.zoomTo(120)")
    expect(graph).to_have_attribute("data-detail", "boxes")
    figures["pan_fps_boxes"] = page.evaluate(GESTURE_FPS, ["pan", 90])
    # Fit: 31,500 rows do not fit 640 px as one column (a line a few pixels wide); they
    # are cut into columns side by side, every node still in view.
    page.evaluate("window.workbenchGraph.fit()")
    figures["in_view_at_fit"] = int(graph.get_attribute("data-in-view"))
    figures["columns_at_fit"] = int(graph.get_attribute("data-overview-columns"))
    figures["full_frame_at_fit_ms"] = int(graph.get_attribute("data-last-render-ms"))
    figures["pan_fps_fit"] = page.evaluate(GESTURE_FPS, ["pan", 90])
    figures["zoom_fps_fit"] = page.evaluate(GESTURE_FPS, ["zoom", 60])
    print(f"\ngenerated {analysis['nodes']} nodes: {figures}")
    keep_timings({f"graph_50k_{key}": value for key, value in figures.items()})
    page.evaluate("window.workbenchGraph.fit()")
    screenshot(page, "graph-50k")

    assert figures["first_view_ms"] < FIRST_VIEW_MS, figures
    assert figures["expand_ms"] < EXPAND_MS, figures
    assert figures["visible_at_first_view"] > 100, figures  # not one lone box
    assert min(v for k, v in figures.items() if "fps" in k) >= FRAMES_PER_S, figures
    assert figures["in_view_at_fit"] == analysis["nodes"]
    assert figures["columns_at_fit"] >= 10, figures
    assert not page_errors


def test_a_generated_model_of_50000_nodes_named_by_scopes_opens_by_scope_within_budget(
    huge_scoped, web_server, page, page_errors
):
    """The same 50,400 nodes named /stage.S/block.B/part/Op: the groups are those scopes
    (210 stages at first, a stage opens to its blocks, a block to its parts), each laid out
    when first opened, within the same budgets."""
    analysis = huge_scoped.analysis
    tree, first = first_view(analysis)
    assert set(tree["groups"]["kind"]) == {"scope"}
    timing = open_graph(page, web_server, huge_scoped, "graph/")
    graph = page.locator("#graph")
    figures = {
        "first_view_ms": timing["since_navigation_ms"],
        "page_received_ms": timing["page_received_ms"],
        "data_received_ms": timing["data_received_ms"],
        "draw_ms": timing["render_ms"],
        "visible": timing["visible"],
    }
    assert timing["visible"] == len(first) == 210

    expands = []
    name = next(n["name"] for n in reversed(analysis["node_list"]) if n["name"].count("/") == 4)
    assert name == "/stage.209/block.19/d/Relu"
    for _depth in ("stage.209", "block.19", "d"):
        items = int(graph.get_attribute("data-visible"))
        page.evaluate("name => window.workbenchGraph.centreOn(name)", name)
        click_node(page, name)  # drawn at its outermost closed group
        wait_until(
            lambda items=items: int(graph.get_attribute("data-visible")) > items,
            timeout_s=10,
            what="expand",
        )
        expands.append(int(graph.get_attribute("data-expand-ms")))
    figures["expand_ms"] = max(expands)
    figures["expand_ms_each"] = expands
    assert drawn(page, name)
    click_node(page, name)
    expect(page.locator("#graph-details h3")).to_have_text(name)
    expect(page.locator("#graph-details")).to_contain_text("In scope")
    print(f"\ngenerated {analysis['nodes']} nodes named by scopes: {figures}")
    keep_timings({f"graph_50k_scoped_{key}": value for key, value in figures.items()})
    screenshot(page, "graph-50k-scopes")

    assert figures["first_view_ms"] < FIRST_VIEW_MS, figures
    assert figures["expand_ms"] < EXPAND_MS, figures
    assert not page_errors


@pytest.fixture
def compiled(densenet) -> Run:
    """A run of DenseNet whose compile stage ran every three consecutive nodes as one
    kernel (a made-up plan: the page only reads which nodes each kernel runs)."""
    nodes = densenet.analysis["node_list"]
    kernels = [
        {
            "id": f"k{i}",
            "func": f"fused_{i}",
            "nodes": [n["name"] for n in nodes[j : j + 3]],
            "op_types": [n["op_type"] for n in nodes[j : j + 3]],
            "time_us": 1.0 + i % 5,
            "backend": "tvm",
        }
        for i, j in enumerate(range(0, len(nodes), 3))
    ]
    run = Run.objects.create(
        owner=densenet.owner,
        model=densenet,
        target=Target.objects.get(name="host"),
        config={"stages": ["analyze", "compile"]},
        status=Status.SUCCEEDED,
    )
    StageResult.objects.create(
        run=run, stage="compile", position=0, status=Status.SUCCEEDED, result={"kernels": kernels}
    )
    return run


def test_the_prepared_graph_and_its_kernels_side_by_side_select_each_other(
    compiled, web_server, page, page_errors
):
    model = compiled.model
    names = [n["name"] for n in model.analysis["node_list"]]
    sign_in(page, web_server)
    page.goto(f"{web_server}/models/{model.pk}/graph/")
    for side in ("#graph", "#kernels"):
        expect(page.locator(side)).to_have_attribute("data-ready", "1", timeout=30_000)
    expect(page.locator("#kernels h2")).to_have_text("Compiled kernels")

    # A node selected on the left lights its kernel up on the right ...
    page.evaluate("name => window.workbenchGraph.jumpTo(name)", names[4])
    expect(page.locator("#graph-details h3")).to_have_text(names[4])
    expect(page.locator("#kernels")).to_have_attribute("data-linked", "1")
    expect(page.locator("#kernels-details h3")).to_have_text("k1")  # nodes 3, 4 and 5

    # ... and a kernel clicked on the right lights its three nodes up on the left.
    page.evaluate("window.workbenchGraphs.kernels.jumpTo('k7')")
    position = page.evaluate("window.workbenchGraphs.kernels.locate('k7')")
    page.mouse.click(position["x"], position["y"])
    expect(page.locator("#kernels-details h3")).to_have_text("k7")
    expect(page.locator("#graph")).to_have_attribute("data-linked", "3")
    expect(page.locator("#graph-search-status")).to_have_text("3 linked")
    expect(page.locator("#graph-details h3")).to_have_text(names[21])
    screenshot(page, "graph-side-by-side")
    assert not page_errors


@pytest.fixture
def uploaded(user) -> OnnxModel:
    """SqueezeNet uploaded (its file in storage) and analyzed as the analyze stage does:
    prepared, its weight generators folded into constants."""
    model = store_model_file(SQUEEZENET, owner=user, name="squeezenet.onnx")
    model.analysis = analyze_prepared(prepare_model(SQUEEZENET)).to_dict()
    model.save(update_fields=["analysis"])
    warm_graph(model.pk)
    return model


def test_the_upload_beside_the_prepared_graph_selects_by_node_name(
    uploaded, web_server, page, page_errors
):
    prepared = [n["name"] for n in uploaded.analysis["node_list"]]
    sign_in(page, web_server)
    page.goto(f"{web_server}/models/{uploaded.pk}/graph/")
    for side in ("#graph", "#upload"):
        expect(page.locator(side)).to_have_attribute("data-ready", "1", timeout=30_000)
    names = page.evaluate("window.workbenchGraphs.upload.names()")
    assert len(names) > len(prepared) and set(names) >= set(prepared)
    expect(page.locator("#graph-count")).to_have_text(str(len(prepared)))
    expect(page.locator("#upload-count")).to_have_text(str(len(names)))
    folded = next(name for name in names if name not in set(prepared))

    # A node of the upload lights up the prepared node of the same name, and back.
    conv = next(n["name"] for n in uploaded.analysis["node_list"] if n["op_type"] == "Conv")
    page.evaluate("name => window.workbenchGraphs.upload.jumpTo(name)", conv)
    expect(page.locator("#upload-details h3")).to_have_text(conv)
    expect(page.locator("#graph")).to_have_attribute("data-linked", "1")
    expect(page.locator("#graph-details h3")).to_have_text(conv)
    relu = prepared[prepared.index(conv) + 1]
    page.evaluate("name => window.workbenchGraph.jumpTo(name)", relu)
    expect(page.locator("#upload-details h3")).to_have_text(relu)
    # A node folded away by preparation has no counterpart.
    page.evaluate("name => window.workbenchGraphs.upload.jumpTo(name)", folded)
    expect(page.locator("#graph")).to_have_attribute("data-linked", "0")
    expect(page.locator("#graph-search-status")).to_have_text("nothing linked")
    screenshot(page, "graph-upload-sides")
    assert not page_errors


@pytest.fixture
def uploaded_and_compiled(uploaded) -> OnnxModel:
    """The uploaded SqueezeNet with a compile result (three nodes a kernel, made up)."""
    nodes = uploaded.analysis["node_list"]
    kernels = [
        {"id": f"k{i}", "nodes": [n["name"] for n in nodes[j : j + 3]], "time_us": 1.0 + i % 5}
        for i, j in enumerate(range(0, len(nodes), 3))
    ]
    run = Run.objects.create(
        owner=uploaded.owner,
        model=uploaded,
        target=Target.objects.get(name="host"),
        config={"stages": ["compile"]},
        status=Status.SUCCEEDED,
    )
    StageResult.objects.create(
        run=run, stage="compile", position=0, status=Status.SUCCEEDED, result={"kernels": kernels}
    )
    return uploaded


def test_with_a_compile_result_the_kernels_and_the_upload_are_two_tabs(
    uploaded_and_compiled, web_server, page, page_errors
):
    model = uploaded_and_compiled
    sign_in(page, web_server)
    page.goto(f"{web_server}/models/{model.pk}/graph/")
    expect(page.locator("#kernels")).to_have_attribute("data-ready", "1", timeout=30_000)
    expect(page.locator("#panel-upload")).to_be_hidden()
    page.click("#tab-upload")
    expect(page.locator("#upload")).to_have_attribute("data-ready", "1", timeout=30_000)
    conv = next(n["name"] for n in model.analysis["node_list"] if n["op_type"] == "Conv")
    page.evaluate("name => window.workbenchGraph.jumpTo(name)", conv)
    expect(page.locator("#upload-details h3")).to_have_text(conv)
    expect(page.locator("#kernels")).to_have_attribute("data-linked", "1")
    assert not page_errors
