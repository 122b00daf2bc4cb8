"""Measure the graph explorer's canvas renderer against other renderers on the same graph,
in the same headless Chromium the browser tests use (docs/graph-renderer.md has the
figures and the decision).

The graph is the browser test's generated model of 50,400 nodes with every group open:
graph-levels.js places it (the same positions for every renderer), then each renderer
draws it from a static page:

- ``canvas``: this project's renderer (frontend/static/workbench/graph.js);
- ``sigma``: sigma.js 3 on graphology (WebGL), from the npm registry;
- ``cytoscape``: Cytoscape.js 3 (canvas), from the npm registry.

The alternatives are not part of the project: install them anywhere
(``npm install sigma@3 graphology cytoscape`` in DIR) and pass ``--npm DIR/node_modules``.
Per renderer and run: first view (navigation start to the first frame drawn, parsing and
placing included), frames per second during a scripted pan and zoom with the whole graph
in view and during a pan near (about 30 rows in view). Prints one JSON object.

    python bench/graph_renderer_bench.py --npm /tmp/npm/node_modules [--repeat 3] [--webgl]

``--webgl`` launches Chromium with SwiftShader's software WebGL (the default flags, those
of the browser tests, disable the GPU, and sigma then has no WebGL context).
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import shutil
import statistics
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROOT = Path(__file__).resolve().parent.parent
STATIC = ROOT / "frontend" / "static" / "workbench"

PARTS = """<div id="graph" class="graph-explorer"><select id="graph-metric"></select>
<input id="graph-search"><span id="graph-search-status"></span>
<button id="graph-expand-all">e</button><button id="graph-collapse-all">c</button>
<button id="graph-fit">f</button>
<div id="graph-plot" style="position:relative;width:900px;height:640px"></div>
<aside id="graph-details"></aside><div id="graph-legend"></div></div>"""

# Every page sets window.bench = {ready: ms since navigation, api: {pan, zoom, fit, near}}.
PAGES = {
    "canvas": """<!doctype html><meta charset="utf-8"><body>{parts}
<script id="graph-data" type="application/json">{data}</script>
<script src="graph-levels.js"></script><script src="graph.js"></script>
<script src="canvas-bench.js"></script>""",
    "sigma": """<!doctype html><meta charset="utf-8"><body>
<div id="plot" style="width:900px;height:640px"></div>
<script id="graph-data" type="application/json">{data}</script>
<script src="graph-levels.js"></script><script src="graphology.umd.min.js"></script>
<script src="sigma.min.js"></script><script src="sigma-bench.js"></script>""",
    "cytoscape": """<!doctype html><meta charset="utf-8"><body>
<div id="plot" style="width:900px;height:640px"></div>
<script id="graph-data" type="application/json">{data}</script>
<script src="graph-levels.js"></script><script src="cytoscape.min.js"></script>
<script src="cytoscape-bench.js"></script>""",
}

SCRIPTS = {
    "canvas-bench.js": """
(function () {
  const root = document.getElementById("graph");
  const wait = setInterval(function () {
    if (!root.dataset.ready) return;
    clearInterval(wait);
    const g = window.workbenchGraph;
    window.bench = { ready: Number(root.dataset.readyAtMs), items: Number(root.dataset.visible),
      api: { pan: function (dx, dy) { g.pan(dx, dy); }, zoom: function (f) { g.zoom(f); },
        fit: function () { g.fit(); }, near: function () { g.zoomTo(20); } } };
  }, 5);
})();""",
    "sigma-bench.js": """
(function () {
  const view = placed();
  const graph = new graphology.Graph({ multi: false, type: "directed" });
  view.items.forEach(function (item, i) {
    graph.addNode(String(item), { x: view.x[i], y: -view.row[i], size: 2, color: "#4c78a8" });
  });
  const E = view.edges;
  for (let e = 0; e < E.from.length; e++) {
    const a = String(E.from[e]), b = String(E.to[e]);
    if (!graph.hasEdge(a, b)) graph.addEdge(a, b, { size: 1, color: "#a7b0be" });
  }
  const renderer = new Sigma(graph, document.getElementById("plot"), { hideEdgesOnMove: false });
  const camera = renderer.getCamera();
  requestAnimationFrame(function () {
    window.bench = { ready: Math.round(performance.now()), items: graph.order,
      api: { pan: function (dx, dy) { const s = camera.getState(); camera.setState({ x: s.x + dx / 900 * s.ratio, y: s.y + dy / 640 * s.ratio }); },
        zoom: function (f) { const s = camera.getState(); camera.setState({ ratio: s.ratio / f }); },
        fit: function () { camera.setState({ x: 0.5, y: 0.5, ratio: 1 }); },
        near: function () { camera.setState({ x: 0.5, y: 0.999, ratio: 30 / view.rows }); } } };
  });
})();""",
    "cytoscape-bench.js": """
(function () {
  const view = placed();
  const elements = view.items.map(function (item, i) {
    return { data: { id: String(item) }, position: { x: view.x[i] * 40, y: view.row[i] * 40 } };
  });
  const E = view.edges, seen = new Set();
  for (let e = 0; e < E.from.length; e++) {
    const id = E.from[e] + ">" + E.to[e];
    if (seen.has(id)) continue;
    seen.add(id);
    elements.push({ data: { id: id, source: String(E.from[e]), target: String(E.to[e]) } });
  }
  const cy = cytoscape({ container: document.getElementById("plot"), elements: elements,
    layout: { name: "preset" }, style: [{ selector: "node", style: { width: 20, height: 20, "background-color": "#4c78a8" } },
      { selector: "edge", style: { width: 1, "line-color": "#a7b0be" } }] });
  cy.fit();
  requestAnimationFrame(function () {
    window.bench = { ready: Math.round(performance.now()), items: cy.nodes().length,
      api: { pan: function (dx, dy) { cy.panBy({ x: -dx, y: -dy }); },
        zoom: function (f) { cy.zoom({ level: cy.zoom() * f, renderedPosition: { x: 450, y: 320 } }); },
        fit: function () { cy.fit(); },
        near: function () { cy.zoom(640 / (30 * 40)); cy.pan({ x: 450 - view.x[0] * 40 * cy.zoom(), y: 0 }); } } };
  });
})();""",
    "placed.js": """
function placed() { // every group open, placed by graph-levels.js as the explorer does
  const data = JSON.parse(document.getElementById("graph-data").textContent);
  const model = window.WorkbenchGraphLevels(data, null);
  model.open.fill(1);
  return model.computeView();
}""",
}

GESTURE_FPS = """async ([kind, steps]) => {
  const api = window.bench.api, times = [];
  await new Promise(resolve => {
    let i = 0;
    function frame(t) {
      times.push(t);
      if (i++ === steps || t - times[0] > 15000) return resolve(); // 15 s at most
      if (kind === "pan") api.pan(-6, -4);
      else api.zoom(i <= steps / 2 ? 1.06 : 1 / 1.06);
      requestAnimationFrame(frame);
    }
    requestAnimationFrame(frame);
  });
  const span = times[times.length - 1] - times[0];
  return Math.round(10000 * (times.length - 1) / span) / 10;
}"""


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def build_site(folder: Path, npm: Path | None, names: list[str]) -> None:
    import os

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "workbench.settings")
    django.setup()  # the generated model comes from the browser test's module
    from frontend.figures.graph.payload import all_levels
    from tests.browser.test_graph_view import analysis_of

    data = all_levels(analysis_of("50k"))
    data["open"] = list(range(len(data["groups"]["parent"])))
    text = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    for name in ("graph-levels.js", "graph.js"):
        shutil.copy(STATIC / name, folder / name)
    for name, body in SCRIPTS.items():
        (folder / name).write_text(body)
    vendored = {
        "sigma": ["graphology/dist/graphology.umd.min.js", "sigma/dist/sigma.min.js"],
        "cytoscape": ["cytoscape/dist/cytoscape.min.js"],
    }
    for name in names:
        for path in vendored.get(name, []):
            shutil.copy(npm / path, folder / Path(path).name)
        page = PAGES[name].format(parts=PARTS, data=text)
        page = page.replace(
            '<script src="graph-levels.js">',
            '<script src="placed.js"></script><script src="graph-levels.js">',
        )
        (folder / f"{name}.html").write_text(page)


def measure(url: str, webgl: bool) -> dict:
    from playwright.sync_api import sync_playwright

    from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS

    args = CHROMIUM_ARGS + (
        ["--use-angle=swiftshader", "--enable-unsafe-swiftshader"] if webgl else []
    )
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=args, headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(url)
        try:
            page.wait_for_function("window.bench && window.bench.ready", timeout=120_000)
        except Exception:
            browser.close()
            return {"error": "; ".join(errors) or "no first frame within 120 s"}
        figures = {
            "first_view_ms": page.evaluate("window.bench.ready"),
            "nodes": page.evaluate("window.bench.items"),
        }
        page.evaluate("window.bench.api.fit()")
        figures["pan_fps_fit"] = page.evaluate(GESTURE_FPS, ["pan", 90])
        print(f"{url}: panned", file=sys.stderr, flush=True)
        figures["zoom_fps_fit"] = page.evaluate(GESTURE_FPS, ["zoom", 60])
        page.evaluate("window.bench.api.near()")
        figures["pan_fps_near"] = page.evaluate(GESTURE_FPS, ["pan", 90])
        if errors:
            figures["errors"] = errors[:3]
        browser.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--npm", type=Path, help="a node_modules with sigma, graphology, cytoscape")
    parser.add_argument("--renderers", default="canvas,sigma,cytoscape")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--webgl", action="store_true", help="software WebGL (SwiftShader)")
    args = parser.parse_args()
    names = args.renderers.split(",")
    if set(names) - {"canvas"} and not args.npm:
        parser.error("--npm is needed for sigma and cytoscape")
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        build_site(folder, args.npm, names)
        handler = functools.partial(Quiet, directory=tmp)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_address[1]}"
        for name in names:
            runs = [measure(f"{base}/{name}.html", args.webgl) for _ in range(args.repeat)]
            good = [r for r in runs if "error" not in r]
            summary: dict = {"runs": runs}
            for key in ("first_view_ms", "pan_fps_fit", "zoom_fps_fit", "pan_fps_near"):
                values = [r[key] for r in good]
                if values:
                    summary[key] = {
                        "median": statistics.median(values),
                        "min": min(values),
                        "max": max(values),
                    }
            results[name] = summary
        server.shutdown()
    print(
        json.dumps(
            {"webgl": "swiftshader" if args.webgl else "off (--disable-gpu)", **results}, indent=1
        )
    )


if __name__ == "__main__":
    main()
