// The model graph explorer. The server lays the graph out once per analysis
// (frontend/figures/graph/, cached); this file only draws it, on a 2D canvas of its own.
//
// Why a canvas and not Plotly (measured in headless Chromium without a GPU, generated
// model of 50,400 nodes, everything expanded): Plotly's scattergl panned at 0.6 frames
// per second and took 9 s to expand everything; this renderer draws only what is in view
// (rows are indexed), switches from dots to op boxes with their attributes as one zooms
// in, and while a gesture goes on over a frame that took long to draw it moves the last
// frame's picture instead, redrawing fully when the gesture rests. See the README's
// "Graph explorer" section for the figures and the libraries weighed against it.
//
// Every node keeps its place in the full layout: a collapsed group is drawn at its head
// node and rows nothing visible occupies are dropped, so expanding or collapsing a group
// recomputes positions in one pass, with no layout in the browser.
(function () {
  "use strict";
  const root = document.getElementById("graph");
  if (!root) return;
  const started = performance.now();
  const inline = document.getElementById("graph-data");
  const loaded = inline ? Promise.resolve(JSON.parse(inline.textContent))
    : fetch(root.dataset.src, { credentials: "same-origin" }).then(function (r) {
      if (!r.ok) throw new Error("graph data: HTTP " + r.status);
      return r.json();
    });
  loaded.then(start, function (error) {
    root.dataset.error = String(error);
    const status = document.getElementById("graph-status");
    if (status) status.textContent = "The graph could not be loaded (" + error.message + "); reload to try again.";
  });

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

  function start(data) {
    // A page that fetches the stored base puts the stage overlays beside it, by node name.
    const sent = document.getElementById("graph-overlays");
    const overlays = sent ? JSON.parse(sent.textContent) : [];
    if (overlays.length) {
      // Overlays come by node name: put their values in node order.
      const index = new Map();
      data.nodes.name.forEach(function (name, v) { index.set(name, v); });
      overlays.forEach(function (m) {
        const values = new Array(data.nodes.name.length).fill(null);
        m.names.forEach(function (name, i) { const v = index.get(name); if (v !== undefined) values[v] = m.values[i]; });
        m.values = values;
      });
      const keys = new Set(overlays.map(function (m) { return m.key; }));
      data.metrics = data.metrics.filter(function (m) { return !keys.has(m.key); }).concat(overlays);
    }
    const nodes = data.nodes, groups = data.groups;
    const N = nodes.name.length, G = groups.kind.length;
    if (!N) return;
    const plot = document.getElementById("graph-plot");
    const details = document.getElementById("graph-details");
    const legend = document.getElementById("graph-legend");
    const searchBox = document.getElementById("graph-search");
    const searchStatus = document.getElementById("graph-search-status");
    const metricSelect = document.getElementById("graph-metric");
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
    if (metricSelect.options.length === 0) {
      data.metrics.forEach(function (m) { metricSelect.append(new Option(m.label, m.key)); });
    }
    const state = {
      collapsed: new Uint8Array(G),
      metric: metrics[data.initial_metric] ? data.initial_metric : data.metrics[0].key,
      selected: null, // an item: node index >= 0, group g as -(g + 1)
      query: "", matches: [], cursor: -1,
      cx: 0, cy: 0, k: 20, // view centre (layout units) and zoom (px per unit)
      hover: null,
    };
    data.collapsed.forEach(function (g) { state.collapsed[g] = 1; });

    const preds = [], succs = [];
    for (let v = 0; v < N; v++) { preds.push([]); succs.push([]); }
    for (let k = 0; k < data.edges.length; k += 2) {
      succs[data.edges[k]].push(data.edges[k + 1]);
      preds[data.edges[k + 1]].push(data.edges[k]);
    }
    // A tensor's producer and consumers, from the node's own neighbours: no index over
    // every tensor name (that took 180 ms on 50,000 nodes, the first time a node was clicked).
    function producerOf(v, t) {
      return preds[v].find(function (u) { return nodes.outputs[u].indexOf(t) >= 0; });
    }
    function consumersOf(v, t) {
      return succs[v].filter(function (w) { return nodes.inputs[w].indexOf(t) >= 0; });
    }
    let layers = 0;
    for (let v = 0; v < N; v++) layers = Math.max(layers, nodes.layer[v] + 1);
    data.metrics.forEach(groupValues);
    let lowerNames = null;
    let view = computeView();
    let colors = itemColors();

    // -- what is visible -------------------------------------------------------------------

    function isGroup(item) { return item < 0; }
    function groupIndex(item) { return -item - 1; }
    function nodeOf(item) { return isGroup(item) ? groups.head[groupIndex(item)] : item; }

    function groupValues(m) {
      // Overlays come without group values: a group sums, or takes the commonest, the
      // least or the most of its members' known values, as the metric says.
      if (m.group_values) return;
      const out = new Array(G).fill(null), counts = new Array(G).fill(null);
      for (let v = 0; v < N; v++) {
        const value = m.values[v];
        if (value === null || value === undefined) continue;
        for (let g = nodes.group[v]; g >= 0; g = groups.parent[g]) {
          if (m.aggregate === "mode") {
            const c = counts[g] || (counts[g] = new Map());
            c.set(value, (c.get(value) || 0) + 1);
          } else if (m.aggregate === "min") out[g] = out[g] === null ? value : Math.min(out[g], value);
          else if (m.aggregate === "max") out[g] = out[g] === null ? value : Math.max(out[g], value);
          else out[g] = (out[g] || 0) + value;
        }
      }
      counts.forEach(function (c, g) {
        if (!c) return;
        let best = null, most = 0;
        c.forEach(function (n, value) { if (n > most) { best = value; most = n; } });
        out[g] = best;
      });
      m.group_values = out;
    }

    function computeView() {
      const top = new Int32Array(G); // the outermost collapsed group around each group, or -1
      for (let g = 0; g < G; g++) {
        const p = groups.parent[g];
        top[g] = p >= 0 && top[p] >= 0 ? top[p] : (state.collapsed[g] ? g : -1);
      }
      const itemOf = new Int32Array(N);
      const items = [];
      for (let g = 0; g < G; g++) if (top[g] === g) items.push(-(g + 1));
      for (let v = 0; v < N; v++) {
        const g = nodes.group[v];
        const t = g >= 0 ? top[g] : -1;
        itemOf[v] = t >= 0 ? -(t + 1) : v;
        if (t < 0) items.push(v);
      }
      const used = new Uint8Array(layers);
      items.forEach(function (item) { used[nodes.layer[nodeOf(item)]] = 1; });
      const rowOf = new Int32Array(layers);
      let rows = 0;
      for (let l = 0; l < layers; l++) { rowOf[l] = rows; if (used[l]) rows += 1; }
      // Items by row, for drawing and hit-testing only what is in view.
      const M = items.length;
      const x = new Float64Array(M), row = new Int32Array(M);
      const rowStart = new Int32Array(rows + 1);
      items.forEach(function (item, i) {
        const v = nodeOf(item);
        x[i] = nodes.x[v]; row[i] = rowOf[nodes.layer[v]];
        rowStart[row[i] + 1] += 1;
      });
      for (let r = 0; r < rows; r++) rowStart[r + 1] += rowStart[r];
      const fill = rowStart.slice(0, rows), byRow = new Int32Array(M);
      for (let i = 0; i < M; i++) byRow[fill[row[i]]++] = i;
      const indexOf = new Map();
      items.forEach(function (item, i) { indexOf.set(item, i); });
      const v = { items: items, itemOf: itemOf, used: used, rowOf: rowOf, rows: rows, x: x, row: row,
        rowStart: rowStart, byRow: byRow, indexOf: indexOf };
      v.edges = edgeLines(v);
      return v;
    }

    function edgeLines(v) {
      // Polylines between visible items through the bends of rows still shown, once per pair.
      const px = [], py = [], start = [0], from = [], to = [], raw = [], lo = [], hi = [], left = [], right = [];
      const seen = new Set(), span = N + G + 2;
      for (let k = 0, e = 0; k < data.edges.length; k += 2, e++) {
        const a = v.itemOf[data.edges[k]], b = v.itemOf[data.edges[k + 1]];
        if (a === b) continue;
        const key = (a + G + 1) * span + (b + G + 1);
        if (seen.has(key)) continue;
        seen.add(key);
        const la = nodes.layer[nodeOf(a)], lb = nodes.layer[nodeOf(b)];
        let x0 = nodes.x[nodeOf(a)], x1 = x0;
        px.push(x0); py.push(v.rowOf[la]);
        const bend = data.bends[e], first = nodes.layer[data.edges[k]] + 1;
        for (let i = 0; i < bend.length; i++) {
          const l = first + i;
          if (l > la && l < lb && v.used[l]) {
            px.push(bend[i]); py.push(v.rowOf[l]);
            x0 = Math.min(x0, bend[i]); x1 = Math.max(x1, bend[i]);
          }
        }
        const xb = nodes.x[nodeOf(b)];
        px.push(xb); py.push(v.rowOf[lb]);
        start.push(px.length);
        from.push(a); to.push(b); raw.push(e);
        lo.push(v.rowOf[la]); hi.push(v.rowOf[lb]);
        left.push(Math.min(x0, xb)); right.push(Math.max(x1, xb));
      }
      return { x: px, y: py, start: start, from: from, to: to, raw: raw, lo: lo, hi: hi, left: left, right: right };
    }

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
    function shapeText(v) { return nodes.shapes[v].map(shapeOf).join(", ") || "none"; }

    function edgeTensors(e) {
      // The tensors an edge carries: the producer's outputs that the consumer reads.
      const u = data.edges[2 * e], w = data.edges[2 * e + 1];
      const read = new Set(nodes.inputs[w]);
      const out = [];
      nodes.outputs[u].forEach(function (t, i) {
        if (t && read.has(t)) {
          const bytes = nodes.output_bytes[u] ? nodes.output_bytes[u][i] : null;
          out.push({ name: t, shape: shapeOf(nodes.shapes[u][i]), bytes: bytes });
        }
      });
      return out;
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
      const r0 = Math.max(0, Math.floor(state.cy - H / 2 / state.k) - 1);
      const r1 = Math.min(view.rows - 1, Math.ceil(state.cy + H / 2 / state.k) + 1);
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
      const edges = drawEdges(r0, r1, xl, xr);
      if (boxes) drawBoxes(shown); else drawDots(shown);
      if (state.k >= EDGE_LABEL_K) drawEdgeLabels(edges);
      drawRings();
      const ms = performance.now() - t;
      heavy = ms > SLOW_FRAME_MS;
      const sctx = snapshot.getContext("2d");
      sctx.clearRect(0, 0, snapshot.width, snapshot.height);
      sctx.drawImage(canvas, 0, 0);
      drawn = { cx: state.cx, cy: state.cy, k: state.k };
      root.dataset.visible = view.items.length;
      root.dataset.inView = shown.length;
      root.dataset.detail = boxes ? "boxes" : "dots";
      root.dataset.lastRenderMs = Math.round(ms);
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
          const s = isGroup(view.items[i]) ? size * 1.6 : (nodes.weight[view.items[i]] ? size * 0.6 : size);
          const [sx, sy] = toScreen(view.x[i], view.row[i]);
          ctx.rect(sx - s / 2, sy - s / 2, s, s);
        });
        ctx.fill();
      });
    }

    function boxSize(item) {
      const k = state.k;
      if (isGroup(item)) return [0.92 * k, 0.62 * k];
      if (nodes.weight[item]) return [0.42 * k, 0.3 * k];
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
      if (nodes.weight[item]) return w > 50 ? [nodes.op_type[item]] : [];
      const lines = [nodes.op_type[item]];
      if (nodes.attributes && nodes.attributes[item]) lines.push(nodes.attributes[item]);
      if (state.k >= EDGE_LABEL_K * 1.5) lines.push(nodes.name[item]);
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
        if (!tensors.length) return;
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
      if (s !== null) ring(isGroup(s) ? s : view.itemOf[s], "#d62728", 3);
    }

    function matchItems() {
      const seen = new Set();
      state.matches.forEach(function (v) { seen.add(view.itemOf[v]); });
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
      state.cx = view.x[i]; state.cy = view.row[i];
      if (rowsTall) state.k = H / rowsTall;
    }

    function initialView() {
      // The top of the graph at a readable scale, centred on what is drawn there.
      const rows = Math.min(view.rows, 30);
      let sum = 0, count = 0;
      for (let j = 0; j < view.rowStart[Math.min(rows, view.rows)]; j++) { sum += view.x[view.byRow[j]]; count += 1; }
      state.k = Math.min(H / (rows + 0.5), 160);
      state.cx = count ? sum / count : 0;
      state.cy = Math.min(rows, view.rows) / 2 - 0.5;
    }

    function fitItems(list) {
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
      view = computeView();
      colors = itemColors();
      drawLegend();
      if (redraw !== false) draw();
    }

    function keepInPlace(g, change) {
      // The group's head stays where it was on screen while rows appear or vanish around it.
      const layer = nodes.layer[groups.head[g]];
      const before = view.rowOf[layer];
      change();
      changed(false);
      state.cy += view.rowOf[layer] - before;
    }

    function expand(g) {
      const t = performance.now();
      keepInPlace(g, function () { state.collapsed[g] = 0; });
      select(view.itemOf[groups.head[g]], -(g + 1));
      root.dataset.expandMs = Math.round(performance.now() - t);
    }

    function collapse(g) {
      keepInPlace(g, function () {
        state.collapsed[g] = 1;
        for (let c = g + 1; c < G; c++) if (isInside(c, g)) state.collapsed[c] = 1;
      });
      select(view.itemOf[groups.head[g]]);
    }

    function isInside(c, g) {
      for (let p = groups.parent[c]; p >= 0; p = groups.parent[p]) if (p === g) return true;
      return false;
    }

    function reveal(v) {
      let shut = false;
      for (let g = nodes.group[v]; g >= 0; g = groups.parent[g]) { shut = shut || state.collapsed[g]; state.collapsed[g] = 0; }
      if (shut) changed(false);
    }

    function jumpTo(v) {
      reveal(v);
      state.selected = v;
      centre(view.indexOf.get(v), Math.min(H / state.k, 12));
      showDetails(v);
      announce(v);
      draw();
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
      const rows = document.querySelectorAll('tr[data-node="' + CSS.escape(nodes.name[v]) + '"]');
      rows.forEach(function (row) { row.classList.add("linked"); });
      root.dispatchEvent(new CustomEvent("graph:select", { detail: { name: nodes.name[v] } }));
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
      const item = itemAt(sx, sy);
      if (item !== null) return showTooltip(sx, sy, itemTooltip(item));
      const e = edgeAt(sx, sy);
      if (e !== null) return showTooltip(sx, sy, edgeTooltip(e));
      tooltip.hidden = true;
    }

    function showTooltip(sx, sy, content) {
      tooltip.replaceChildren(...content);
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
          (state.collapsed[g] ? " (click to expand)" : "")), ...figures];
      }
      return [el("b", null, nodes.name[item]), el("div", null, nodes.op_type[item] + (nodes.attributes && nodes.attributes[item] ? " · " + nodes.attributes[item] : "")),
        el("div", null, "out " + shapeText(item)), ...figures, nodes.costed[item] ? null : el("i", null, "not costed")];
    }

    function edgeTooltip(e) {
      const E = view.edges;
      const tensors = edgeTensors(E.raw[e]);
      const from = nodes.name[nodeOf(E.from[e])], to = nodes.name[nodeOf(E.to[e])];
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
      if (item === null) return;
      if (isGroup(item) && state.collapsed[groupIndex(item)]) expand(groupIndex(item));
      else select(item);
    });
    canvas.addEventListener("pointerleave", function () { tooltip.hidden = true; });
    canvas.addEventListener("wheel", function (event) {
      event.preventDefault();
      tooltip.hidden = true;
      zoomAt(event.offsetX, event.offsetY, Math.exp(-event.deltaY * 0.0015));
      beginGesture();
      requestDraw();
    }, { passive: false });
    canvas.addEventListener("keydown", function (event) {
      const step = 80 / state.k;
      const moves = { ArrowLeft: [-step, 0], ArrowRight: [step, 0], ArrowUp: [0, -step], ArrowDown: [0, step] };
      if (moves[event.key]) { state.cx += moves[event.key][0]; state.cy += moves[event.key][1]; }
      else if (event.key === "+" || event.key === "=") zoomAt(W / 2, H / 2, 1.25);
      else if (event.key === "-") zoomAt(W / 2, H / 2, 0.8);
      else return;
      event.preventDefault();
      requestDraw();
    });
    window.addEventListener("resize", function () { if (resize()) draw(); });

    function search(query) {
      const q = query.trim().toLowerCase();
      state.query = query;
      state.matches = [];
      state.cursor = -1;
      if (q) {
        if (!lowerNames) lowerNames = nodes.name.map(function (n) { return n.toLowerCase(); });
        for (let v = 0; v < N; v++) {
          if (lowerNames[v].includes(q) || nodes.op_type[v].toLowerCase().includes(q)) state.matches.push(v);
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

    function nodeLink(v) { return button(nodes.name[v], function () { jumpTo(v); }); }

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
        const about = title === "Outputs" ? " " + shapeOf(nodes.shapes[v][i]) : "";
        list.append(el("li", null, el("code", null, t), about, " ", ...link(t)));
      });
      return [el("h4", null, title), list];
    }

    function showDetails(item) {
      details.replaceChildren();
      if (isGroup(item)) return showGroup(groupIndex(item));
      const v = item;
      const g = nodes.group[v];
      fill(details,
        el("h3", { class: "node-name" }, nodes.name[v]),
        el("p", { class: "op" }, nodes.op_type[v], nodes.costed[v] ? null : " · not costed"),
        nodes.attributes && nodes.attributes[v] ? el("p", { class: "attributes" }, nodes.attributes[v]) : null,
        g >= 0 ? el("p", null, "In " + groups.kind[g] + " ", el("b", null, groups.label[g]), " ",
          button("Collapse", function () { collapse(g); }, "small")) : null,
        figureTable(v, [
          ["output shape", shapeText(v)],
          ["MACs", si(nodes.macs[v])],
          ["bytes read", si(nodes.bytes_read[v], "B")],
          ["bytes written", si(nodes.bytes_written[v], "B")],
        ]),
        ...tensorList("Inputs", v, nodes.inputs[v], function (t) {
          const from = producerOf(v, t);
          return from !== undefined ? ["from ", nodeLink(from)] : ["(model input or weight)"];
        }),
        ...tensorList("Outputs", v, nodes.outputs[v], function (t) {
          const to = consumersOf(v, t);
          return to.length ? ["to "].concat(...to.map(function (c) { return [nodeLink(c), " "]; })) : ["(model output)"];
        }),
        el("h4", null, "Neighbours"),
        el("p", { class: "neighbours" }, "↑ ", ...preds[v].map(nodeLink), el("br"), "↓ ", ...succs[v].map(nodeLink)),
      );
    }

    function showGroup(g) {
      const shut = state.collapsed[g];
      const parent = groups.parent[g];
      fill(details,
        el("h3", null, groups.label[g]),
        el("p", { class: "op" }, groups.kind[g] + " of " + groups.size[g] + " nodes"),
        button(shut ? "Expand" : "Collapse", function () { return shut ? expand(g) : collapse(g); }, "small"),
        parent >= 0 ? el("p", null, "In " + groups.kind[parent] + " ", el("b", null, groups.label[parent]), " ",
          button("Collapse", function () { collapse(parent); }, "small")) : null,
        figureTable(-(g + 1), [["op type (heaviest)", metricText(metrics.op_type, -(g + 1))]]),
        el("p", null, "Starts at ", nodeLink(groups.head[g])),
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
    function setAll(collapsed) {
      state.collapsed.fill(collapsed);
      changed(false);
      if (state.selected === null || view.indexOf.get(state.selected) === undefined) initialView();
      else centre(view.indexOf.get(state.selected));
      draw();
    }
    document.getElementById("graph-expand-all").addEventListener("click", function () { setAll(0); });
    document.getElementById("graph-collapse-all").addEventListener("click", function () { setAll(1); });
    document.getElementById("graph-fit").addEventListener("click", function () {
      fitItems(Array.from(view.items.keys())); draw();
    });

    function debounce(fn, ms) {
      let timer = null;
      return function () { clearTimeout(timer); timer = setTimeout(fn, ms); };
    }

    // Rows of node tables (data-node) select their node here: the linked selection.
    document.addEventListener("click", function (event) {
      const row = event.target.closest && event.target.closest("tr[data-node]");
      if (!row || event.target.closest("a, button")) return;
      const v = nodes.name.indexOf(row.dataset.node);
      if (v < 0) return;
      const panel = root.closest('[role="tabpanel"]');
      if (panel && panel.hidden) document.getElementById(panel.getAttribute("aria-labelledby")).click();
      if (!W) resize();
      jumpTo(v);
      root.scrollIntoView({ block: "nearest" });
    });

    // For tests and for links from other views: where a node is drawn, in client pixels.
    window.workbenchGraph = {
      locate: function (name) {
        const v = nodes.name.indexOf(name);
        if (v < 0) return null;
        const i = view.indexOf.get(view.itemOf[v]);
        const [sx, sy] = toScreen(view.x[i], view.row[i]);
        const box = canvas.getBoundingClientRect();
        if (sx < 0 || sy < 0 || sx > W || sy > H) return null;
        return { x: box.left + sx, y: box.top + sy };
      },
      jumpTo: function (name) { const v = nodes.name.indexOf(name); if (v >= 0) jumpTo(v); },
      expand: function (g) { expand(g); },
      pan: function (dx, dy) { state.cx -= dx / state.k; state.cy -= dy / state.k; beginGesture(); requestDraw(); },
      zoom: function (factor) { zoomAt(W / 2, H / 2, factor); beginGesture(); requestDraw(); },
      zoomTo: function (k) { state.k = k; draw(); },
      fit: function () { fitItems(Array.from(view.items.keys())); draw(); },
    };

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
