// The model graph explorer: draws what graph-levels.js places, on a 2D canvas of its own.
// The server lays each level of the hierarchy out once, when it is first opened
// (frontend/figures/graph/levels.py); the model page fetches the first view's levels and
// then each group's as it opens, pages that hand the graph over inline send them all.
//
// Why a canvas and not Plotly (measured in headless Chromium without a GPU, generated
// model of 50,400 nodes, everything expanded): Plotly's scattergl panned at 0.6 frames
// per second and took 9 s to expand everything; this renderer draws only what is in view
// (rows are indexed), switches from dots to op boxes with their attributes as one zooms
// in, and while a gesture goes on over a frame that took long to draw it moves the last
// frame's picture instead, redrawing fully when the gesture rests. docs/graph-renderer.md
// has the figures and the libraries weighed against it.
//
// A page may hold several explorers (.graph-explorer, each with its parts' ids prefixed by
// its own id: "graph-plot", "kernels-plot"...); graph-sides.js links two of them.
(function () {
  "use strict";
  document.querySelectorAll(".graph-explorer").forEach(function (root) {
    if (root.dataset.started) return; // this file is included once per explorer
    root.dataset.started = "1";
    const started = performance.now();
    const inline = document.getElementById(root.id + "-data");
    const fetchLevels = inline ? null : function (groups) {
      return getJSON(root.dataset.levels + "?g=" + (groups ? groups.join(",") : "all"));
    };
    const loaded = inline ? Promise.resolve(JSON.parse(inline.textContent)) : getJSON(root.dataset.src);
    loaded.then(function (data) { start(data, root, started, fetchLevels); }).catch(function (error) {
      root.dataset.error = String(error);
      const status = document.getElementById(root.id + "-status");
      if (status) status.textContent = "The graph could not be loaded (" + error.message + "); reload to try again.";
      else throw error;
    });
  });

  function getJSON(url) {
    return fetch(url, { credentials: "same-origin" }).then(function (r) {
      if (!r.ok) throw new Error("graph data: HTTP " + r.status);
      return r.json();
    });
  }

  const PALETTE = [
    "#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b", "#b279a2", "#ff9da6",
    "#9d755d", "#bab0ac", "#1f77b4", "#8c564b", "#17becf", "#bcbd22", "#7f7f7f", "#d62728",
  ];
  const VIRIDIS = ["#440154", "#482878", "#3e4989", "#31688e", "#26828e", "#1f9e89", "#35b779", "#6ece58", "#b5de2b", "#fde725"];
  const STEPS = 64; // continuous values are drawn in this many colours
  const GREY = "#c8ced8";
  const BOX_K = 70; // px per layout unit from which nodes are boxes with labels
  const EDGE_LABEL_K = 110; // ... and edges carry their tensor's shape
  const EDGE_LABELS = 400; // at most this many edge labels at once
  const SLOW_FRAME_MS = 14; // a frame slower than this is moved, not redrawn, during a gesture
  const REST_MS = 120; // a gesture rests after this long without input

  const ramp = [];
  for (let i = 0; i < STEPS; i++) ramp.push(mix(VIRIDIS, i / (STEPS - 1)));
  function mix(stops, t) {
    const f = t * (stops.length - 1), i = Math.min(Math.floor(f), stops.length - 2), r = f - i;
    const a = parseInt(stops[i].slice(1), 16), b = parseInt(stops[i + 1].slice(1), 16);
    const c = [16, 8, 0].map(function (s) { return Math.round(((a >> s) & 255) * (1 - r) + ((b >> s) & 255) * r); });
    return "rgb(" + c.join(",") + ")";
  }

  function start(data, root, started, fetchLevels) {
    function part(name) { return document.getElementById(root.id + "-" + name); }
    const model = window.WorkbenchGraphLevels(data, fetchLevels);
    // Stage overlays come by node name, beside the stored graph or inside the inline one.
    const sent = part("overlays");
    const given = sent ? JSON.parse(sent.textContent) : [];
    const overlays = (Array.isArray(given) ? given : []).concat(data.metrics.filter(function (m) { return m.names; }));
    overlays.forEach(model.addOverlay);
    const keys = new Set(overlays.map(function (m) { return m.key; }));
    data.metrics = data.metrics.filter(function (m) { return !m.names && !keys.has(m.key); }).concat(overlays);
    const groups = model.groups, cols = model.cols;
    const N = model.N, G = model.G;
    const countText = part("count");
    if (countText) countText.textContent = N; // the page may know only the upload's count
    if (!N) return;
    const plot = part("plot");
    const details = part("details");
    const legend = part("legend");
    const searchBox = part("search");
    const searchStatus = part("search-status");
    const metricSelect = part("metric");
    const canvas = document.createElement("canvas");
    canvas.tabIndex = 0;
    canvas.setAttribute("role", "img");
    canvas.setAttribute("aria-label", "Model graph: arrow keys pan, + and - zoom, search below to find a node");
    const tooltip = document.createElement("div");
    tooltip.className = "graph-tooltip";
    tooltip.hidden = true;
    plot.replaceChildren(canvas, tooltip);
    const ctx = canvas.getContext("2d");
    const snapshot = document.createElement("canvas");
    root.dataset.renderer = "canvas";

    const metrics = {};
    data.metrics.forEach(function (m) { metrics[m.key] = m; });
    if (metricSelect.options.length !== data.metrics.length) {
      metricSelect.replaceChildren();
      data.metrics.forEach(function (m) { metricSelect.append(new Option(m.label, m.key)); });
    }
    const state = {
      // a run page names the stage's overlay to open with (data-initial)
      metric: metrics[root.dataset.initial] ? root.dataset.initial
        : metrics[data.initial_metric] ? data.initial_metric : data.metrics[0].key,
      selected: null, // an item: node index >= 0, group g as -(g + 1)
      query: "", matches: [], cursor: -1,
      cx: 0, cy: 0, k: 20, // view centre (layout units) and zoom (px per unit)
      hover: null,
    };
    function producerOf(v, t) {
      const e = (model.inEdges.get(v) || []).find(function (e) { return e.tensors.indexOf(t) >= 0; });
      return e ? e.u : undefined;
    }
    function consumersOf(v, t) {
      return (model.outEdges.get(v) || []).filter(function (e) { return e.tensors.indexOf(t) >= 0; })
        .map(function (e) { return e.v; });
    }
    function neighbours(map, v, end) {
      return Array.from(new Set((map.get(v) || []).map(function (e) { return e[end]; })));
    }
    let lowerNames = null;
    let view = model.computeView();
    let colors = itemColors();

    function isGroup(item) { return item < 0; }
    function groupIndex(item) { return -item - 1; }
    function itemName(item) { return isGroup(item) ? groups.label[groupIndex(item)] : model.name[item]; }

    // -- colours ---------------------------------------------------------------------------

    function metricValue(m, item) {
      return isGroup(item) ? m.group_values[groupIndex(item)] : m.values[item];
    }

    function scaleOf(m) {
      // The value range over the whole graph (not just what is open), so that colours keep
      // their meaning while groups open and close.
      if (m.range) return m.range;
      const log = m.scale === "log";
      let low = Infinity, high = -Infinity;
      [m.values, m.group_values].forEach(function (values) {
        values.forEach(function (value) {
          if (value === null || value === undefined || (log && value <= 0)) return;
          const t = log ? Math.log10(value) : value;
          if (t < low) low = t;
          if (t > high) high = t;
        });
      });
      if (low === Infinity) { low = 0; high = 1; }
      if (high === low) high = low + 1;
      m.range = { low: low, high: high, log: log };
      return m.range;
    }

    function colorOf(m, item) {
      const value = metricValue(m, item);
      if (value === null || value === undefined) return GREY;
      if (m.kind === "categorical") return PALETTE[value % PALETTE.length];
      const s = scaleOf(m);
      if (s.log && value <= 0) return GREY;
      const t = ((s.log ? Math.log10(value) : value) - s.low) / (s.high - s.low);
      return ramp[Math.max(0, Math.min(STEPS - 1, Math.round(t * (STEPS - 1))))];
    }

    function itemColors() {
      const m = metrics[state.metric];
      return view.items.map(function (item) { return colorOf(m, item); });
    }

    function ink(color) {
      // Dark text on light fills, white on dark ones (contrast 4.5:1 or more either way).
      let r, g, b;
      if (color[0] === "#") { const n = parseInt(color.slice(1), 16); r = n >> 16; g = (n >> 8) & 255; b = n & 255; } else { [r, g, b] = color.slice(4, -1).split(",").map(Number); }
      return 0.299 * r + 0.587 * g + 0.114 * b > 140 ? "#111" : "#fff";
    }

    // -- text ------------------------------------------------------------------------------

    function si(value, unit, digits) {
      if (value === null || value === undefined) return "unknown";
      const places = digits === undefined ? 2 : digits;
      const scales = [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
      for (const [scale, prefix] of scales) {
        if (Math.abs(value) >= scale) return (value / scale).toFixed(places) + " " + prefix + (unit || "");
      }
      const text = Number.isInteger(value) ? String(value) : value.toFixed(Math.max(places, 1));
      return unit ? text + " " + unit : text;
    }

    function metricText(m, item) {
      const value = metricValue(m, item);
      if (m.kind === "categorical") return value === null || value === undefined ? "unknown" : m.categories[value];
      return si(value, m.unit);
    }

    function shapeOf(shape) { return shape ? shape.map(function (d) { return d === null ? "?" : d; }).join("×") : "unknown shape"; }
    function shapeText(v) { return (cols.shapes[v] || []).map(shapeOf).join(", ") || "none"; }

    function edgeTensors(pair) {
      // The tensors an edge carries (the producer's outputs the consumer reads), with their
      // shapes and sizes when the producer's level is loaded.
      const u = pair[0], outputs = cols.outputs[u];
      return pair[2].map(function (t) {
        const i = outputs ? outputs.indexOf(t) : -1;
        if (i < 0) return { name: t, shape: "shape not loaded", bytes: null };
        const bytes = cols.output_bytes[u] ? cols.output_bytes[u][i] : null;
        return { name: t, shape: shapeOf(cols.shapes[u][i]), bytes: bytes };
      });
    }

    // -- drawing ---------------------------------------------------------------------------

    let W = 0, H = 0, dpr = 1, drawn = null, heavy = false, gesture = 0, restTimer = null, frameWanted = false;

    function resize() {
      const box = plot.getBoundingClientRect();
      if (!box.width || !box.height) return false;
      dpr = window.devicePixelRatio || 1;
      W = box.width; H = box.height;
      canvas.width = snapshot.width = Math.round(W * dpr);
      canvas.height = snapshot.height = Math.round(H * dpr);
      canvas.style.width = W + "px"; canvas.style.height = H + "px";
      return true;
    }

    function toScreen(x, r) { return [(x - state.cx) * state.k + W / 2, (r - state.cy) * state.k + H / 2]; }
    function toWorld(sx, sy) { return [(sx - W / 2) / state.k + state.cx, (sy - H / 2) / state.k + state.cy]; }

    function visibleRows() {
      let r0 = Math.max(0, Math.floor(state.cy - H / 2 / state.k) - 1);
      let r1 = Math.min(view.rows - 1, Math.ceil(state.cy + H / 2 / state.k) + 1);
      if (rowLimit) { r0 = Math.max(r0, rowLimit[0]); r1 = Math.min(r1, rowLimit[1]); }
      return [r0, r1];
    }

    function requestDraw() {
      if (frameWanted) return;
      frameWanted = true;
      requestAnimationFrame(function () { frameWanted = false; frame(); });
    }

    function frame() {
      if (gesture && heavy && drawn) return moveSnapshot();
      draw();
    }

    function moveSnapshot() {
      // The last full frame, moved and scaled to the current view (a map viewer's pan).
      const r = state.k / drawn.k;
      const ox = W / 2 - (W / 2) * r + (drawn.cx - state.cx) * state.k;
      const oy = H / 2 - (H / 2) * r + (drawn.cy - state.cy) * state.k;
      ctx.setTransform(1, 0, 0, 1, 0, 0);
      ctx.clearRect(0, 0, canvas.width, canvas.height);
      ctx.drawImage(snapshot, ox * dpr, oy * dpr, canvas.width * r, canvas.height * r);
    }

    function draw() {
      if (!W && !resize()) return;
      const t = performance.now();
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, W, H);
      let count = 0, boxes = false;
      if (overview) {
        const kept = { cx: state.cx, cy: state.cy, k: state.k };
        for (let c = 0; c < overview.C; c++) {
          const [left, top, width, height] = columnState(c);
          ctx.save();
          ctx.beginPath(); ctx.rect(left, top, width, height); ctx.clip();
          count += drawScene().length;
          ctx.restore();
          if (c) { ctx.fillStyle = "#e3e7ee"; ctx.fillRect(left - overview.gap * overview.k / 2, top, 1, height); }
        }
        rowLimit = null;
        Object.assign(state, kept);
      } else {
        const shown = drawScene();
        count = shown.length;
        boxes = state.k >= BOX_K;
      }
      const ms = performance.now() - t;
      heavy = ms > SLOW_FRAME_MS;
      const sctx = snapshot.getContext("2d");
      sctx.clearRect(0, 0, snapshot.width, snapshot.height);
      sctx.drawImage(canvas, 0, 0);
      drawn = overview ? null : { cx: state.cx, cy: state.cy, k: state.k }; // no moving the columns
      root.dataset.visible = view.items.length;
      root.dataset.inView = count;
      root.dataset.detail = boxes ? "boxes" : "dots";
      root.dataset.overviewColumns = overview ? overview.C : 0;
      root.dataset.lastRenderMs = Math.round(ms);
    }

    function drawScene() {
      // What is in view at the current centre and zoom (within rowLimit, if set).
      const [r0, r1] = visibleRows();
      const xl = state.cx - W / 2 / state.k - 1, xr = state.cx + W / 2 / state.k + 1;
      const boxes = state.k >= BOX_K;
      const shown = [];
      for (let r = r0; r <= r1; r++) {
        for (let j = view.rowStart[r]; j < view.rowStart[r + 1]; j++) {
          const i = view.byRow[j];
          if (view.x[i] >= xl && view.x[i] <= xr) shown.push(i);
        }
      }
      drawFrames(r0, r1, xl, xr);
      const edges = drawEdges(r0, r1, xl, xr);
      if (boxes) drawBoxes(shown); else drawDots(shown);
      if (state.k >= EDGE_LABEL_K) drawEdgeLabels(edges);
      drawRings();
      return shown;
    }

    // -- the overview: "Fit" on a graph far taller than wide --------------------------------
    // Fitting 31,500 rows into 640 px draws a line a few pixels wide. Instead the rows are
    // cut into columns laid side by side, like a newspaper's, as many as the canvas's
    // aspect asks for: every item stays in view, the picture fills the canvas, and the
    // first gesture (drag, wheel, click, key) goes back to the one-column view at the
    // point under the pointer. docs/graph-renderer.md says why.
    let overview = null, rowLimit = null;

    function fitAll() {
      overview = null;
      const all = Array.from(view.items.keys());
      fitItems(all);
      if (!all.length) return;
      let x0 = Infinity, x1 = -Infinity;
      all.forEach(function (i) { x0 = Math.min(x0, view.x[i]); x1 = Math.max(x1, view.x[i]); });
      view.frames.forEach(function (f) { x0 = Math.min(x0, f.x0); x1 = Math.max(x1, f.x1); });
      const w = x1 - x0 + 2, h = view.rows + 1, gap = 1.5;
      if (w * state.k >= W / 4 || h < 8) return; // the plain fit fills a quarter or more
      const C = Math.max(2, Math.min(Math.floor(h / 4), Math.round(Math.sqrt((h * W) / (H * (w + gap))))));
      const R = Math.ceil(h / C);
      const k = Math.min(W / (C * (w + gap)), H / R);
      overview = { C: C, R: R, k: k, x0: x0 - 1, y0: -1, w: w, gap: gap,
        ox: (W - C * (w + gap) * k) / 2 + (gap * k) / 2, oy: (H - R * k) / 2 };
    }

    function columnState(c) {
      // Centre and zoom that draw column c in its strip; the strip (screen px) returned.
      const o = overview, left = o.ox + c * (o.w + o.gap) * o.k;
      state.k = o.k;
      state.cx = o.x0 - (left - W / 2) / o.k;
      state.cy = o.y0 + c * o.R - (o.oy - H / 2) / o.k;
      rowLimit = [Math.max(0, Math.ceil(o.y0 + c * o.R)), Math.floor(o.y0 + (c + 1) * o.R - 1e-9)];
      return [left, o.oy, o.w * o.k, o.R * o.k];
    }

    function leaveOverview(sx, sy) {
      // Back to one column, the point under (sx, sy) staying where it is on screen.
      if (!overview) return;
      const o = overview;
      const c = Math.max(0, Math.min(o.C - 1, Math.floor((sx - o.ox + (o.gap * o.k) / 2) / ((o.w + o.gap) * o.k))));
      columnState(c);
      rowLimit = null;
      overview = null;
    }

    function framePad(f) { return Math.max(0.28, 0.46 - 0.05 * f.depth); }

    function drawFrames(r0, r1, xl, xr) {
      // An open group: a light box around its inside, its name on top when there is room.
      const labels = state.k >= 24;
      ctx.lineWidth = 1;
      ctx.font = "11px system-ui, sans-serif";
      ctx.textAlign = "left";
      ctx.textBaseline = "bottom";
      view.frames.forEach(function (f) {
        const pad = framePad(f);
        if (f.r1 + pad < r0 || f.r0 - pad > r1 || f.x1 < xl || f.x0 > xr) return;
        const [ax, ay] = toScreen(f.x0, f.r0 - pad), [bx, by] = toScreen(f.x1, f.r1 + pad);
        ctx.fillStyle = f.depth % 2 ? "rgba(76,120,168,0.05)" : "rgba(76,120,168,0.08)";
        ctx.strokeStyle = state.selected === -(f.g + 1) ? "#d62728" : "#9fb3cc";
        ctx.beginPath();
        ctx.roundRect(ax, ay, bx - ax, by - ay, 6);
        ctx.fill(); ctx.stroke();
        if (labels) {
          ctx.fillStyle = "#41526b";
          ctx.fillText(clip(groups.label[f.g] || groups.kind[f.g], Math.max(40, bx - ax - 8)), ax + 4, ay + 12);
        }
      });
    }

    function frameAt(sx, sy) {
      // The innermost open group whose box holds the point.
      const [wx, wy] = toWorld(sx, sy);
      let best = null;
      view.frames.forEach(function (f) {
        const pad = framePad(f);
        if (wx >= f.x0 && wx <= f.x1 && wy >= f.r0 - pad && wy <= f.r1 + pad && (!best || f.depth > best.depth)) best = f;
      });
      return best;
    }

    function drawEdges(r0, r1, xl, xr) {
      const E = view.edges, inView = [];
      ctx.beginPath();
      for (let e = 0; e < E.from.length; e++) {
        if (E.hi[e] < r0 || E.lo[e] > r1 || E.right[e] < xl || E.left[e] > xr) continue;
        inView.push(e);
        for (let p = E.start[e]; p < E.start[e + 1]; p++) {
          const [sx, sy] = toScreen(E.x[p], E.y[p]);
          if (p === E.start[e]) ctx.moveTo(sx, sy); else ctx.lineTo(sx, sy);
        }
      }
      ctx.strokeStyle = "#a7b0be";
      ctx.lineWidth = state.k >= BOX_K ? 1.25 : 1;
      ctx.stroke();
      return inView;
    }

    function drawDots(shown) {
      const size = Math.max(2, Math.min(10, state.k * 0.4));
      const byColor = new Map();
      shown.forEach(function (i) {
        const c = colors[i];
        if (!byColor.has(c)) byColor.set(c, []);
        byColor.get(c).push(i);
      });
      byColor.forEach(function (list, color) {
        ctx.fillStyle = color;
        ctx.beginPath();
        list.forEach(function (i) {
          const s = isGroup(view.items[i]) ? size * 1.6 : (cols.weight[view.items[i]] ? size * 0.6 : size);
          const [sx, sy] = toScreen(view.x[i], view.row[i]);
          ctx.rect(sx - s / 2, sy - s / 2, s, s);
        });
        ctx.fill();
      });
    }

    function boxSize(item) {
      const k = state.k;
      if (isGroup(item)) return [0.92 * k, 0.62 * k];
      if (cols.weight[item]) return [0.42 * k, 0.3 * k];
      return [0.86 * k, 0.56 * k];
    }

    function drawBoxes(shown) {
      const font = Math.max(9, Math.min(14, state.k * 0.13));
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      shown.forEach(function (i) {
        const item = view.items[i];
        const [w, h] = boxSize(item);
        const [sx, sy] = toScreen(view.x[i], view.row[i]);
        ctx.fillStyle = colors[i];
        ctx.strokeStyle = isGroup(item) ? "#1d2733" : "#33415c";
        ctx.lineWidth = isGroup(item) ? 2 : 1;
        ctx.beginPath();
        ctx.roundRect(sx - w / 2, sy - h / 2, w, h, 4);
        ctx.fill(); ctx.stroke();
        if (isGroup(item)) { // a second edge: there is more inside
          ctx.beginPath(); ctx.roundRect(sx - w / 2 + 3, sy - h / 2 + 3, w - 6, h - 6, 3); ctx.stroke();
        }
        const lines = boxLines(item, w, font);
        ctx.fillStyle = ink(colors[i]);
        lines.forEach(function (line, n) {
          ctx.font = (n === 0 ? "600 " : "") + (n === 0 ? font : font - 1) + "px system-ui, sans-serif";
          ctx.fillText(clip(line, w - 8), sx, sy + (n - (lines.length - 1) / 2) * (font + 2));
        });
      });
    }

    function clip(text, width) {
      // Cut with an ellipsis rather than squeeze: squeezed text is unreadable.
      if (ctx.measureText(text).width <= width) return text;
      let low = 0, high = text.length;
      while (low < high) {
        const mid = (low + high + 1) >> 1;
        if (ctx.measureText(text.slice(0, mid) + "…").width <= width) low = mid; else high = mid - 1;
      }
      return text.slice(0, low) + "…";
    }

    function boxLines(item, w, font) {
      if (isGroup(item)) {
        const g = groupIndex(item);
        return [groups.label[g], groups.kind[g] + " · " + groups.size[g] + " nodes"];
      }
      if (cols.weight[item]) return w > 50 ? [model.opType[item]] : [];
      const lines = [model.opType[item]];
      if (cols.attributes[item]) lines.push(cols.attributes[item]);
      if (state.k >= EDGE_LABEL_K * 1.5) lines.push(model.name[item]);
      return lines.slice(0, Math.max(1, Math.floor((0.56 * state.k) / (font + 2))));
    }

    function drawEdgeLabels(inView) {
      const E = view.edges;
      ctx.font = "10px system-ui, sans-serif";
      ctx.textAlign = "left";
      ctx.textBaseline = "middle";
      inView.slice(0, EDGE_LABELS).forEach(function (e) {
        if (isGroup(E.from[e])) return;
        const tensors = edgeTensors(E.raw[e]);
        if (!tensors.length || tensors[0].bytes === null && tensors[0].shape === "shape not loaded") return;
        const p = E.start[e];
        const [ax, ay] = toScreen(E.x[p], E.y[p]);
        const [bx, by] = toScreen(E.x[p + 1], E.y[p + 1]);
        const text = tensors.map(function (t) { return t.shape; }).join(", ");
        const mx = (ax + bx) / 2 + 4, my = (ay + by) / 2;
        ctx.fillStyle = "rgba(255,255,255,0.85)";
        ctx.fillRect(mx - 2, my - 7, ctx.measureText(text).width + 4, 14);
        ctx.fillStyle = "#3b4556";
        ctx.fillText(text, mx, my);
      });
    }

    function ring(item, color, width) {
      const i = view.indexOf.get(item);
      if (i === undefined) return;
      const [sx, sy] = toScreen(view.x[i], view.row[i]);
      let [w, h] = state.k >= BOX_K ? boxSize(item) : [Math.max(8, state.k * 0.4), Math.max(8, state.k * 0.4)];
      w += 8; h += 8;
      ctx.strokeStyle = color; ctx.lineWidth = width;
      ctx.beginPath(); ctx.roundRect(sx - w / 2, sy - h / 2, w, h, 6); ctx.stroke();
    }

    function drawRings() {
      matchItems().forEach(function (item) { ring(item, "#ff7f0e", 2.5); });
      const s = state.selected;
      if (s !== null) ring(isGroup(s) ? s : view.itemOf(s), "#d62728", 3);
    }

    function matchItems() {
      const seen = new Set();
      state.matches.forEach(function (v) { seen.add(view.itemOf(v)); });
      return Array.from(seen);
    }

    // -- legend and value scale --------------------------------------------------------------

    function drawLegend() {
      const m = metrics[state.metric];
      legend.replaceChildren();
      if (m.kind !== "categorical") {
        const s = scaleOf(m);
        const bar = el("span", { class: "colorbar", role: "img",
          "aria-label": m.label + " from " + scaleText(m, s.low) + " to " + scaleText(m, s.high) });
        bar.style.background = "linear-gradient(to right, " + VIRIDIS.join(", ") + ")";
        legend.append(el("span", { class: "scale" }, el("b", null, m.label + (s.log ? " (log scale)" : "")), " ",
          scaleText(m, s.low), " ", bar, " ", scaleText(m, s.high)), swatch(GREY, "zero or unknown"));
        return;
      }
      const shown = new Set();
      view.items.forEach(function (item) { shown.add(metricValue(m, item)); });
      legend.append(el("b", null, m.label));
      m.categories.forEach(function (category, value) { // commonest first
        if (shown.has(value)) legend.append(swatch(PALETTE[value % PALETTE.length], category));
      });
      if (shown.has(null) || shown.has(undefined)) legend.append(swatch(GREY, "unknown"));
    }

    function scaleText(m, t) { return si(m.scale === "log" ? Math.pow(10, t) : t, m.unit, 1); }

    function swatch(color, text) {
      const i = el("i");
      i.style.background = color;
      return el("span", { class: "swatch" }, i, text);
    }

    // -- view range --------------------------------------------------------------------------

    function centre(i, rowsTall) {
      overview = null;
      state.cx = view.x[i]; state.cy = view.row[i];
      if (rowsTall) state.k = H / rowsTall;
    }

    function initialView() {
      // The top of the graph at a readable scale, centred on what is drawn there.
      overview = null;
      const rows = Math.min(view.rows, 30);
      let sum = 0, count = 0;
      for (let j = 0; j < view.rowStart[Math.min(rows, view.rows)]; j++) { sum += view.x[view.byRow[j]]; count += 1; }
      state.k = Math.min(H / (rows + 0.5), 160);
      state.cx = count ? sum / count : 0;
      state.cy = Math.min(rows, view.rows) / 2 - 0.5;
    }

    function fitItems(list) {
      overview = null;
      let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
      list.forEach(function (i) {
        x0 = Math.min(x0, view.x[i]); x1 = Math.max(x1, view.x[i]);
        y0 = Math.min(y0, view.row[i]); y1 = Math.max(y1, view.row[i]);
      });
      state.cx = (x0 + x1) / 2; state.cy = (y0 + y1) / 2;
      state.k = Math.min(W / (x1 - x0 + 3), H / (y1 - y0 + 3), 160);
    }

    function zoomAt(sx, sy, factor) {
      const [wx, wy] = toWorld(sx, sy);
      state.k = Math.max(0.02, Math.min(400, state.k * factor));
      state.cx = wx - (sx - W / 2) / state.k;
      state.cy = wy - (sy - H / 2) / state.k;
    }

    // -- interaction -------------------------------------------------------------------------

    function changed(redraw) {
      view = model.computeView();
      colors = itemColors();
      drawLegend();
      if (overview) fitAll(); // the columns of what is open now
      if (redraw !== false) draw();
    }

    function placeOf(g) {
      // Where a group is drawn: its box when closed, the top middle of its frame when open.
      const i = view.indexOf.get(-(g + 1));
      if (i !== undefined) return [view.x[i], view.row[i]];
      const f = view.frames.find(function (f) { return f.g === g; });
      return f ? [(f.x0 + f.x1) / 2, f.r0] : null;
    }

    function keepInPlace(g, change) {
      // The group stays where it was on screen while the view grows or shrinks around it.
      const before = placeOf(g);
      change();
      changed(false);
      const after = placeOf(g);
      if (before && after) { state.cx += after[0] - before[0]; state.cy += after[1] - before[1]; }
    }

    let busy = Promise.resolve();
    function queue(task) { busy = busy.then(task, task); return busy; }

    function expand(g) {
      const t = performance.now();
      root.dataset.expanding = "1";
      return queue(function () {
        return model.load([g]).then(function () {
          keepInPlace(g, function () { model.open[g] = 1; });
          select(-(g + 1));
          root.dataset.expandMs = Math.round(performance.now() - t);
          delete root.dataset.expanding;
        }, failed);
      });
    }

    function failed(error) {
      delete root.dataset.expanding;
      searchStatus.textContent = "Could not open the group (" + error.message + ")";
    }

    function collapse(g) {
      keepInPlace(g, function () {
        model.open[g] = 0;
        for (let c = g + 1; c < G; c++) if (model.isInside(c, g)) model.open[c] = 0;
      });
      select(-(g + 1));
    }

    function reveal(v) {
      // Open every group around node v, loading the levels that are not in yet.
      const chain = model.ancestors(v).filter(function (g) { return !model.isOpen(g); });
      if (!chain.length) return Promise.resolve();
      return model.load(chain).then(function () {
        chain.forEach(function (g) { model.open[g] = 1; });
        changed(false);
      });
    }

    function jumpTo(v) {
      return queue(function () {
        return reveal(v).then(function () {
          state.selected = v;
          centre(view.indexOf.get(v), Math.min(H / state.k, 12));
          showDetails(v);
          announce(v);
          draw();
        }, failed);
      });
    }

    function select(item, detailsOf) {
      state.selected = item;
      showDetails(detailsOf === undefined ? item : detailsOf);
      if (!isGroup(item) && (detailsOf === undefined || detailsOf === item)) announce(item);
      draw();
    }

    function announce(v) {
      // Tables that list nodes (data-node) light the row up: the linked selection.
      document.querySelectorAll("tr.linked").forEach(function (row) { row.classList.remove("linked"); });
      const rows = document.querySelectorAll('tr[data-node="' + CSS.escape(model.name[v]) + '"]');
      rows.forEach(function (row) { row.classList.add("linked"); });
      root.dispatchEvent(new CustomEvent("graph:select", { detail: { name: model.name[v] } }));
    }

    function itemAt(sx, sy) {
      const [wx, wy] = toWorld(sx, sy);
      const r = Math.round(wy);
      let best = null, bestDistance = Infinity;
      for (let row = Math.max(0, r - 1); row <= Math.min(view.rows - 1, r + 1); row++) {
        for (let j = view.rowStart[row]; j < view.rowStart[row + 1]; j++) {
          const i = view.byRow[j], item = view.items[i];
          const [w, h] = state.k >= BOX_K ? boxSize(item) : [Math.max(16, state.k * 0.5), Math.max(16, state.k * 0.5)];
          const dx = Math.abs(view.x[i] - wx) * state.k, dy = Math.abs(view.row[i] - wy) * state.k;
          if (dx <= w / 2 + 2 && dy <= h / 2 + 2 && dx + dy < bestDistance) { best = item; bestDistance = dx + dy; }
        }
      }
      return best;
    }

    function edgeAt(sx, sy) {
      const E = view.edges, [r0, r1] = visibleRows();
      let best = null, bestDistance = 5; // px
      for (let e = 0; e < E.from.length; e++) {
        if (E.hi[e] < r0 || E.lo[e] > r1) continue;
        for (let p = E.start[e]; p + 1 < E.start[e + 1]; p++) {
          const [ax, ay] = toScreen(E.x[p], E.y[p]), [bx, by] = toScreen(E.x[p + 1], E.y[p + 1]);
          const d = segmentDistance(sx, sy, ax, ay, bx, by);
          if (d < bestDistance) { best = e; bestDistance = d; }
        }
      }
      return best;
    }

    function segmentDistance(px, py, ax, ay, bx, by) {
      const dx = bx - ax, dy = by - ay, len = dx * dx + dy * dy;
      const t = len ? Math.max(0, Math.min(1, ((px - ax) * dx + (py - ay) * dy) / len)) : 0;
      return Math.hypot(px - ax - t * dx, py - ay - t * dy);
    }

    function hoverAt(sx, sy) {
      if (overview) return; // dots of a pixel: zoom in (any gesture) to point at one
      const item = itemAt(sx, sy);
      if (item !== null) return showTooltip(sx, sy, itemTooltip(item));
      const e = edgeAt(sx, sy);
      if (e !== null) return showTooltip(sx, sy, edgeTooltip(e));
      tooltip.hidden = true;
    }

    function showTooltip(sx, sy, content) {
      tooltip.replaceChildren(...content.filter(function (c) { return c !== null && c !== undefined; }));
      tooltip.hidden = false;
      tooltip.style.left = Math.min(sx + 14, W - 260) + "px";
      tooltip.style.top = Math.min(sy + 14, H - 120) + "px";
    }

    function itemTooltip(item) {
      const figures = data.metrics.filter(function (m) { return m.kind !== "categorical"; })
        .map(function (m) { return el("div", null, m.label + ": " + metricText(m, item)); });
      if (isGroup(item)) {
        const g = groupIndex(item);
        return [el("b", null, groups.label[g]), el("div", null, groups.kind[g] + " of " + groups.size[g] + " nodes" +
          (model.isOpen(g) ? "" : " (click to expand)")), ...figures];
      }
      return [el("b", null, model.name[item]), el("div", null, model.opType[item] + (cols.attributes[item] ? " · " + cols.attributes[item] : "")),
        el("div", null, "out " + shapeText(item)), ...figures, cols.costed[item] ? null : el("i", null, "not costed")];
    }

    function edgeTooltip(e) {
      const E = view.edges;
      const tensors = edgeTensors(E.raw[e]);
      const from = itemName(E.from[e]), to = itemName(E.to[e]);
      return [el("b", null, "tensor" + (tensors.length > 1 ? "s" : "")),
        ...tensors.map(function (t) { return el("div", null, t.name + ": " + t.shape + ", " + (t.bytes === null || t.bytes === undefined ? "size unknown" : si(t.bytes, "B"))); }),
        el("div", { class: "hint" }, from + " → " + to)];
    }

    let press = null, lastInput = 0;

    function beginGesture() {
      gesture += 1;
      clearTimeout(restTimer);
      restTimer = setTimeout(function () { gesture = 0; draw(); }, REST_MS);
    }

    canvas.addEventListener("pointerdown", function (event) {
      leaveOverview(event.offsetX, event.offsetY);
      press = { x: event.offsetX, y: event.offsetY, cx: state.cx, cy: state.cy, moved: false };
      try { canvas.setPointerCapture(event.pointerId); } catch (e) { /* a scripted pointer has no capture */ }
    });
    canvas.addEventListener("pointermove", function (event) {
      if (press) {
        const dx = event.offsetX - press.x, dy = event.offsetY - press.y;
        if (!press.moved && Math.hypot(dx, dy) <= 4) return;
        press.moved = true;
        tooltip.hidden = true;
        state.cx = press.cx - dx / state.k; state.cy = press.cy - dy / state.k;
        beginGesture();
        requestDraw();
        return;
      }
      const now = performance.now();
      if (now - lastInput < 30) return; // hover hit tests at most ~30 times a second
      lastInput = now;
      hoverAt(event.offsetX, event.offsetY);
    });
    canvas.addEventListener("pointerup", function (event) {
      const p = press;
      press = null;
      if (!p || p.moved) return;
      const item = itemAt(event.offsetX, event.offsetY);
      if (item === null) {
        const f = frameAt(event.offsetX, event.offsetY);
        if (f) select(-(f.g + 1));
        return;
      }
      if (isGroup(item) && !model.isOpen(groupIndex(item))) expand(groupIndex(item));
      else select(item);
    });
    canvas.addEventListener("pointerleave", function () { tooltip.hidden = true; });
    canvas.addEventListener("wheel", function (event) {
      event.preventDefault();
      tooltip.hidden = true;
      leaveOverview(event.offsetX, event.offsetY);
      zoomAt(event.offsetX, event.offsetY, Math.exp(-event.deltaY * 0.0015));
      beginGesture();
      requestDraw();
    }, { passive: false });
    canvas.addEventListener("keydown", function (event) {
      leaveOverview(W / 2, H / 2);
      const step = 80 / state.k;
      const moves = { ArrowLeft: [-step, 0], ArrowRight: [step, 0], ArrowUp: [0, -step], ArrowDown: [0, step] };
      if (moves[event.key]) { state.cx += moves[event.key][0]; state.cy += moves[event.key][1]; }
      else if (event.key === "+" || event.key === "=") zoomAt(W / 2, H / 2, 1.25);
      else if (event.key === "-") zoomAt(W / 2, H / 2, 0.8);
      else return;
      event.preventDefault();
      requestDraw();
    });
    window.addEventListener("resize", function () {
      if (!resize()) return;
      if (overview) fitAll();
      draw();
    });

    function search(query) {
      const q = query.trim().toLowerCase();
      state.query = query;
      state.matches = [];
      state.cursor = -1;
      if (q) {
        if (!lowerNames) lowerNames = model.name.map(function (n) { return n.toLowerCase(); });
        for (let v = 0; v < N; v++) {
          if (lowerNames[v].includes(q) || model.opType[v].toLowerCase().includes(q)) state.matches.push(v);
        }
      }
      searchStatus.textContent = q ? state.matches.length + (state.matches.length === 1 ? " match" : " matches") : "";
      if (state.matches.length) fitItems(matchItems().map(function (item) { return view.indexOf.get(item); }));
      draw();
    }

    function nextMatch() {
      if (!state.matches.length) return;
      state.cursor = (state.cursor + 1) % state.matches.length;
      searchStatus.textContent = (state.cursor + 1) + " of " + state.matches.length;
      jumpTo(state.matches[state.cursor]);
    }

    // -- details panel -----------------------------------------------------------------------

    function el(tag, attrs) {
      const node = document.createElement(tag);
      Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
      for (let i = 2; i < arguments.length; i++) {
        const child = arguments[i];
        if (child !== null && child !== undefined) node.append(child);
      }
      return node;
    }

    function fill(parent) {
      for (let i = 1; i < arguments.length; i++) if (arguments[i]) parent.append(arguments[i]);
    }

    function button(text, onclick, cls) {
      const b = el("button", { type: "button", class: cls || "link-button" }, text);
      b.addEventListener("click", onclick);
      return b;
    }

    function nodeLink(v) { return button(model.name[v], function () { jumpTo(v); }); }

    function figureTable(item, extra) {
      const rows = extra.slice();
      data.metrics.forEach(function (m) {
        if (m.kind !== "categorical" || m.key !== "op_type") rows.push([m.label, metricText(m, item)]);
      });
      return el("table", { class: "grid compact" }, el("tbody", null, ...rows.map(function (r) {
        return el("tr", null, el("th", null, r[0]), el("td", { class: "num" }, r[1]));
      })));
    }

    function tensorList(title, v, tensors, link) {
      const list = el("ul", { class: "tensors" });
      tensors.forEach(function (t, i) {
        if (!t) return;
        const about = title === "Outputs" ? " " + shapeOf(cols.shapes[v][i]) : "";
        list.append(el("li", null, el("code", null, t), about, " ", ...link(t)));
      });
      return [el("h4", null, title), list];
    }

    function showDetails(item) {
      details.replaceChildren();
      if (isGroup(item)) return showGroup(groupIndex(item));
      const v = item;
      const g = model.innermost[v];
      fill(details,
        el("h3", { class: "node-name" }, model.name[v]),
        el("p", { class: "op" }, model.opType[v], cols.costed[v] ? null : " · not costed"),
        cols.attributes[v] ? el("p", { class: "attributes" }, cols.attributes[v]) : null,
        g >= 0 ? el("p", null, "In " + groups.kind[g] + " ", el("b", null, groups.label[g]), " ",
          button("Collapse", function () { collapse(g); }, "small")) : null,
        figureTable(v, [
          ["output shape", shapeText(v)],
          ["MACs", si(cols.macs[v])],
          ["bytes read", si(cols.bytes_read[v], "B")],
          ["bytes written", si(cols.bytes_written[v], "B")],
        ]),
        ...tensorList("Inputs", v, (cols.inputs[v] || []), function (t) {
          const from = producerOf(v, t);
          return from !== undefined ? ["from ", nodeLink(from)] : ["(model input or weight)"];
        }),
        ...tensorList("Outputs", v, (cols.outputs[v] || []), function (t) {
          const to = consumersOf(v, t);
          return to.length ? ["to "].concat(...to.map(function (c) { return [nodeLink(c), " "]; })) : ["(model output)"];
        }),
        el("h4", null, "Neighbours"),
        el("p", { class: "neighbours" }, "↑ ", ...neighbours(model.inEdges, v, "u").map(nodeLink), el("br"), "↓ ", ...neighbours(model.outEdges, v, "v").map(nodeLink)),
      );
    }

    function showGroup(g) {
      const shut = !model.isOpen(g);
      const parent = groups.parent[g];
      fill(details,
        el("h3", null, groups.label[g]),
        el("p", { class: "op" }, groups.kind[g] + " of " + groups.size[g] + " nodes"),
        button(shut ? "Expand" : "Collapse", function () { return shut ? expand(g) : collapse(g); }, "small"),
        parent >= 0 ? el("p", null, "In " + groups.kind[parent] + " ", el("b", null, groups.label[parent]), " ",
          button("Collapse", function () { collapse(parent); }, "small")) : null,
        figureTable(-(g + 1), [["op type (heaviest)", metricText(metrics.op_type, -(g + 1))]]),
        groups.first[g] !== null ? el("p", null, "Starts at ", nodeLink(groups.first[g])) : null,
      );
    }

    // -- start -------------------------------------------------------------------------------

    metricSelect.value = state.metric;
    metricSelect.addEventListener("change", function () {
      state.metric = metricSelect.value; colors = itemColors(); drawLegend(); draw();
    });
    searchBox.addEventListener("input", debounce(function () {
      if (searchBox.value !== state.query) search(searchBox.value);
    }, 150));
    searchBox.addEventListener("keydown", function (event) {
      if (event.key !== "Enter") return;
      event.preventDefault();
      if (searchBox.value !== state.query) search(searchBox.value); // typed faster than the debounce
      nextMatch();
    });
    function setAll(open) {
      const t = performance.now();
      return queue(function () {
        return (open ? model.loadAll() : Promise.resolve()).then(function () {
          model.open.fill(open);
          changed(false);
          if (state.selected === null || view.indexOf.get(state.selected) === undefined) initialView();
          else centre(view.indexOf.get(state.selected));
          draw();
          root.dataset.expandAllMs = Math.round(performance.now() - t);
        }, failed);
      });
    }
    part("expand-all").addEventListener("click", function () { setAll(1); });
    part("collapse-all").addEventListener("click", function () { setAll(0); });
    part("fit").addEventListener("click", function () {
      fitAll(); draw();
    });

    function debounce(fn, ms) {
      let timer = null;
      return function () { clearTimeout(timer); timer = setTimeout(fn, ms); };
    }

    // Rows of node tables (data-node) select their node here: the linked selection.
    document.addEventListener("click", function (event) {
      const row = event.target.closest && event.target.closest("tr[data-node]");
      if (!row || event.target.closest("a, button")) return;
      const v = model.name.indexOf(row.dataset.node);
      if (v < 0) return;
      const panel = root.closest('[role="tabpanel"]');
      if (panel && panel.hidden) document.getElementById(panel.getAttribute("aria-labelledby")).click();
      if (!W) resize();
      jumpTo(v);
      root.scrollIntoView({ block: "nearest" });
    });

    function highlight(names) {
      // Light up nodes another view selected (graph-sides.js), without telling it back.
      const wanted = new Set(names);
      state.query = ""; state.cursor = -1;
      state.matches = [];
      for (let v = 0; v < N; v++) if (wanted.has(model.name[v])) state.matches.push(v);
      root.dataset.linked = state.matches.length;
      searchStatus.textContent = state.matches.length ? state.matches.length + " linked" : "nothing linked";
      if (!state.matches.length) return draw();
      const v = state.matches[0];
      return queue(function () { // the first one is shown: its groups open
        return reveal(v).then(function () {
          state.selected = v;
          centre(view.indexOf.get(v));
          showDetails(v);
          draw();
        }, failed);
      });
    }

    // For tests and for links from other views: where a node is drawn, in client pixels.
    const api = {
      highlight: highlight,
      locate: function (name) {
        const v = model.name.indexOf(name);
        if (v < 0) return null;
        const i = view.indexOf.get(view.itemOf(v));
        const [sx, sy] = toScreen(view.x[i], view.row[i]);
        const box = canvas.getBoundingClientRect();
        if (sx < 0 || sy < 0 || sx > W || sy > H) return null;
        return { x: box.left + sx, y: box.top + sy };
      },
      names: function () { return model.name.slice(); },
      jumpTo: function (name) { const v = model.name.indexOf(name); return v >= 0 ? jumpTo(v) : Promise.resolve(); },
      expand: function (g) { return expand(g); },
      centreOn: function (name) { // the item a node is drawn at, nothing opened
        const v = model.name.indexOf(name);
        if (v < 0) return;
        centre(view.indexOf.get(view.itemOf(v)));
        draw();
      },
      expandAll: function () { return setAll(1); },
      groupOf: function (name) { const v = model.name.indexOf(name); return v >= 0 ? model.ancestors(v) : null; },
      pan: function (dx, dy) { leaveOverview(W / 2, H / 2); state.cx -= dx / state.k; state.cy -= dy / state.k; beginGesture(); requestDraw(); },
      zoom: function (factor) { leaveOverview(W / 2, H / 2); zoomAt(W / 2, H / 2, factor); beginGesture(); requestDraw(); },
      zoomTo: function (k) { leaveOverview(W / 2, H / 2); state.k = k; draw(); },
      fit: function () { fitAll(); draw(); },
    };
    window.workbenchGraphs = window.workbenchGraphs || {};
    window.workbenchGraphs[root.id] = api;
    if (root.id === "graph") window.workbenchGraph = api;

    function ready() {
      resize();
      initialView();
      drawLegend();
      draw();
      requestAnimationFrame(function () {
        root.dataset.renderMs = Math.round(performance.now() - started);
        root.dataset.readyAtMs = Math.round(performance.now()); // since navigation began
        root.dataset.ready = "1";
      });
    }
    if (plot.getBoundingClientRect().width) ready();
    else { // in a hidden tab: draw when it first shows
      const watch = new ResizeObserver(function () {
        if (!plot.getBoundingClientRect().width) return;
        watch.disconnect();
        ready();
      });
      watch.observe(plot);
    }
  }
})();
