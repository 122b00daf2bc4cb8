// The model graph view. The server lays the graph out (frontend/figures/graph.py); this
// file only draws it. Every node keeps its place in the full layout: a collapsed group is
// drawn at its head node and rows nothing visible occupies are dropped, so expanding or
// collapsing a group recomputes positions in one pass, with no layout in the browser.
(function () {
  "use strict";
  const root = document.getElementById("graph");
  const source = document.getElementById("graph-data");
  if (!root || !source || !window.Plotly) return;
  const started = performance.now();
  const data = JSON.parse(source.textContent);
  const nodes = data.nodes;
  const groups = data.groups;
  const N = nodes.name.length;
  const G = groups.kind.length;
  if (!N) return;

  const plot = document.getElementById("graph-plot");
  const details = document.getElementById("graph-details");
  const legend = document.getElementById("graph-legend");
  const searchBox = document.getElementById("graph-search");
  const searchStatus = document.getElementById("graph-search-status");
  const metricSelect = document.getElementById("graph-metric");
  const LABELS_TRACE = 5; // see traces()
  const LABEL_LIMIT = 150; // op names are written next to the markers below this many in view
  const PALETTE = [
    "#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b", "#b279a2", "#ff9da6",
    "#9d755d", "#bab0ac", "#1f77b4", "#8c564b", "#17becf", "#bcbd22", "#7f7f7f", "#d62728",
  ];
  const GREY = "#c8ced8";
  // SVG draws a few hundred markers at once; WebGL pays its start-up (most of a second
  // without a GPU) only when many are visible, and then draws tens of thousands.
  const WEBGL_ITEMS = 1500;
  const webgl = webglAvailable();
  let traceType = "scatter";
  const metrics = {};
  data.metrics.forEach(function (m) { metrics[m.key] = m; });

  const state = {
    collapsed: new Uint8Array(G),
    metric: data.initial_metric || data.metrics[0].key,
    selected: null, // an item: node index >= 0, group g as -(g + 1)
    query: "",
    matches: [],
    cursor: -1,
    range: null,
  };
  data.collapsed.forEach(function (g) { state.collapsed[g] = 1; });

  // Neighbours and tensors for the details panel.
  const preds = [], succs = [];
  for (let v = 0; v < N; v++) { preds.push([]); succs.push([]); }
  for (let k = 0; k < data.edges.length; k += 2) {
    succs[data.edges[k]].push(data.edges[k + 1]);
    preds[data.edges[k + 1]].push(data.edges[k]);
  }
  const producer = new Map(), consumers = new Map();
  nodes.outputs.forEach(function (outs, v) {
    outs.forEach(function (t) { if (t && !producer.has(t)) producer.set(t, v); });
  });
  nodes.inputs.forEach(function (ins, v) {
    ins.forEach(function (t) {
      if (!t) return;
      if (!consumers.has(t)) consumers.set(t, []);
      consumers.get(t).push(v);
    });
  });
  let layers = 0;
  for (let v = 0; v < N; v++) layers = Math.max(layers, nodes.layer[v] + 1);
  let lowerNames = null;
  let view = computeView();

  // -- what is visible ---------------------------------------------------------------------

  function isGroup(item) { return item < 0; }
  function groupIndex(item) { return -item - 1; }
  function nodeOf(item) { return isGroup(item) ? groups.head[groupIndex(item)] : item; }

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
    const rowY = new Float64Array(layers);
    let y = 0;
    for (let l = 0; l < layers; l++) { rowY[l] = -y; if (used[l]) y += 1; }
    const v = { items: items, itemOf: itemOf, used: used, rowY: rowY, rows: y };
    v.edges = edgeLines(v);
    return v;
  }

  function edgeLines(v) {
    const xs = [], ys = [], seen = new Set();
    for (let k = 0, e = 0; k < data.edges.length; k += 2, e++) {
      const a = v.itemOf[data.edges[k]], b = v.itemOf[data.edges[k + 1]];
      if (a === b) continue;
      const key = a + ":" + b;
      if (seen.has(key)) continue;
      seen.add(key);
      const la = nodes.layer[nodeOf(a)], lb = nodes.layer[nodeOf(b)];
      xs.push(nodes.x[nodeOf(a)]); ys.push(v.rowY[la]);
      const bend = data.bends[e], first = nodes.layer[data.edges[k]] + 1;
      for (let i = 0; i < bend.length; i++) {
        const l = first + i;
        if (l > la && l < lb && v.used[l]) { xs.push(bend[i]); ys.push(v.rowY[l]); }
      }
      xs.push(nodes.x[nodeOf(b)], null); ys.push(v.rowY[lb], null);
    }
    return { x: xs, y: ys };
  }

  function position(item) {
    const v = nodeOf(item);
    return [nodes.x[v], view.rowY[nodes.layer[v]]];
  }

  // -- figures ------------------------------------------------------------------------------

  function si(value, unit, digits) {
    if (value === null || value === undefined) return "—";
    const places = digits === undefined ? 2 : digits;
    const scales = [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
    for (const [scale, prefix] of scales) {
      if (Math.abs(value) >= scale) return (value / scale).toFixed(places) + " " + prefix + (unit || "");
    }
    const text = Number.isInteger(value) ? String(value) : value.toFixed(Math.max(places, 1));
    return unit ? text + " " + unit : text;
  }

  function metricValue(m, item) {
    return isGroup(item) ? m.group_values[groupIndex(item)] : m.values[item];
  }

  function metricText(m, item) {
    const value = metricValue(m, item);
    if (m.kind === "categorical") return value === null || value === undefined ? "—" : m.categories[value];
    return si(value, m.unit);
  }

  function shapeText(v) {
    return nodes.shapes[v].map(function (s) { return s ? s.join("×") : "?"; }).join(", ") || "—";
  }

  function escapeHtml(text) {
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function hoverText(item) {
    const figures = data.metrics.filter(function (m) { return m.kind !== "categorical"; })
      .map(function (m) { return m.label + ": " + escapeHtml(metricText(m, item)); });
    if (isGroup(item)) {
      const g = groupIndex(item);
      return "<b>" + escapeHtml(groups.label[g]) + "</b><br>" + groups.kind[g] + " of " +
        groups.size[g] + " nodes (click to expand)<br>" + figures.join("<br>");
    }
    return "<b>" + escapeHtml(nodes.name[item]) + "</b><br>" + escapeHtml(nodes.op_type[item]) +
      "<br>out " + escapeHtml(shapeText(item)) + "<br>" + figures.join("<br>") +
      (nodes.costed[item] ? "" : "<br><i>not costed</i>");
  }

  function nodeTraces() {
    const m = metrics[state.metric];
    const log = m.kind !== "categorical" && m.scale === "log";
    const valued = emptyPoints(), unknown = emptyPoints();
    view.items.forEach(function (item) {
      const value = metricValue(m, item);
      const known = value !== null && value !== undefined && !(log && value <= 0);
      const points = known ? valued : unknown;
      const [x, y] = position(item);
      points.x.push(x); points.y.push(y);
      points.text.push(hoverText(item));
      points.symbol.push(isGroup(item) ? "square" : "circle");
      points.size.push(isGroup(item) ? 11 + Math.min(10, 2 * Math.log2(groups.size[groupIndex(item)])) : 9);
      if (known) {
        points.color.push(m.kind === "categorical" ? PALETTE[value % PALETTE.length] : (log ? Math.log10(value) : value));
      }
    });
    const marker = { color: valued.color, symbol: valued.symbol, size: valued.size, line: { width: 1, color: "#33415c" } };
    if (m.kind !== "categorical") Object.assign(marker, colorScale(m, valued.color, log));
    return [
      pointTrace(valued, marker, m.label),
      pointTrace(unknown, { color: GREY, symbol: unknown.symbol, size: unknown.size, line: { width: 1, color: "#8a93a3" } }, "no value"),
    ];

    function emptyPoints() { return { x: [], y: [], text: [], symbol: [], size: [], color: [] }; }
    function pointTrace(p, mk, name) {
      return {
        type: traceType, mode: "markers", name: name, x: p.x, y: p.y, marker: mk,
        hovertext: p.text, hoverinfo: "text",
      };
    }
  }

  function colorScale(m, colors, log) {
    let low = Infinity, high = -Infinity;
    colors.forEach(function (c) { if (c < low) low = c; if (c > high) high = c; });
    if (low === Infinity) { low = 0; high = 1; }
    if (high === low) high = low + 1;
    const bar = { title: { text: m.label + (log ? " (log)" : ""), side: "right" }, thickness: 12, len: 0.8 };
    if (log) {
      bar.tickvals = []; bar.ticktext = [];
      for (let p = Math.ceil(low); p <= Math.floor(high); p++) {
        bar.tickvals.push(p); bar.ticktext.push(si(Math.pow(10, p), m.unit, 0));
      }
    }
    return { colorscale: "Viridis", cmin: low, cmax: high, showscale: true, colorbar: bar };
  }

  function ringTrace(items, color, size) {
    const xs = [], ys = [];
    items.forEach(function (item) { const [x, y] = position(item); xs.push(x); ys.push(y); });
    return {
      type: traceType, mode: "markers", x: xs, y: ys, hoverinfo: "skip",
      marker: { symbol: "circle-open", size: size, color: color, line: { width: 3, color: color } },
    };
  }

  function labelTrace() {
    // Op names beside the markers once few are in view, where the row leaves them room.
    const xs = [], ys = [], text = [];
    const r = state.range;
    const rows = new Map();
    let count = 0;
    view.items.forEach(function (item) {
      const [x, y] = position(item);
      if (!r || x < r.x[0] || x > r.x[1] || y < r.y[0] || y > r.y[1]) return;
      count += 1;
      if (!rows.has(y)) rows.set(y, []);
      rows.get(y).push([x, item]);
    });
    if (count <= LABEL_LIMIT) {
      const pxPerUnit = plotSize()[0] / (r.x[1] - r.x[0]);
      rows.forEach(function (row, y) {
        row.sort(function (a, b) { return a[0] - b[0]; });
        row.forEach(function ([x, item], i) {
          const label = isGroup(item) ? groups.label[groupIndex(item)] : nodes.op_type[item];
          const room = i + 1 < row.length ? (row[i + 1][0] - x) * pxPerUnit : Infinity;
          if (room < 6 * label.length + 14) return;
          xs.push(x); ys.push(y); text.push(label);
        });
      });
    }
    // SVG text: WebGL text is blurry and this trace is never large.
    return { type: "scatter", mode: "text", x: xs, y: ys, text: text, hoverinfo: "skip",
      textposition: "middle right", textfont: { size: 10, color: "#394150" } };
  }

  function matchItems() {
    const seen = new Set();
    state.matches.forEach(function (v) { seen.add(view.itemOf[v]); });
    return Array.from(seen);
  }

  function traces() {
    const [valued, unknown] = nodeTraces();
    return [
      { type: traceType, mode: "lines", x: view.edges.x, y: view.edges.y, hoverinfo: "skip",
        line: { color: "#a7b0be", width: 1 } },
      valued,
      unknown,
      ringTrace(matchItems(), "#ff7f0e", 18),
      ringTrace(state.selected === null ? [] : [state.selected], "#d62728", 22),
      labelTrace(),
    ];
  }

  function layout() {
    return {
      margin: { l: 8, r: 8, t: 8, b: 8 },
      showlegend: false,
      hovermode: "closest",
      dragmode: "pan",
      plot_bgcolor: "#fff",
      xaxis: { visible: false, range: state.range.x.slice() },
      yaxis: { visible: false, range: state.range.y.slice() },
    };
  }

  function draw() {
    const t = performance.now();
    traceType = webgl && view.items.length > WEBGL_ITEMS ? "scattergl" : "scatter";
    root.dataset.renderer = traceType;
    root.dataset.visible = view.items.length;
    delete root.dataset.lastRenderMs;
    drawLegend();
    return window.Plotly.react(plot, traces(), layout(), {
      // No double-click reset: two quick clicks on two nodes must not throw the view away.
      scrollZoom: true, doubleClick: false, displaylogo: false, responsive: true,
      modeBarButtonsToRemove: ["select2d", "lasso2d"],
    }).then(function () { root.dataset.lastRenderMs = Math.round(performance.now() - t); });
  }

  function drawLegend() {
    const m = metrics[state.metric];
    legend.replaceChildren();
    if (m.kind !== "categorical") {
      legend.append(swatch(GREY, "zero or unknown"));
      return;
    }
    const shown = new Set();
    view.items.forEach(function (item) { shown.add(metricValue(m, item)); });
    m.categories.forEach(function (category, value) { // commonest first
      if (shown.has(value)) legend.append(swatch(PALETTE[value % PALETTE.length], category));
    });
  }

  function swatch(color, text) {
    return el("span", { class: "swatch" }, el("i", { style: "background:" + color }), text);
  }

  // -- view range ---------------------------------------------------------------------------

  function plotSize() {
    const box = plot.getBoundingClientRect();
    return [Math.max(box.width - 16, 100), Math.max(box.height - 16, 100)];
  }

  function square(center, rows) {
    // A view around ``center`` ``rows`` tall, with as much x per pixel as y per pixel.
    const [w, h] = plotSize();
    const width = rows * w / h;
    return { x: [center[0] - width / 2, center[0] + width / 2], y: [center[1] - rows / 2, center[1] + rows / 2] };
  }

  function initialRange() {
    // The top of the graph at a readable scale, centred on what is drawn there.
    const rows = Math.min(view.rows, 45);
    let sum = 0, count = 0;
    view.items.forEach(function (item) {
      const [x, y] = position(item);
      if (y > -rows) { sum += x; count += 1; }
    });
    return square([sum / count, -rows / 2 + 0.75], rows + 0.5);
  }

  function fitRange(items, pad) {
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    items.forEach(function (item) {
      const [x, y] = position(item);
      x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y);
    });
    return { x: [x0 - pad, x1 + pad], y: [y0 - pad, y1 + pad] };
  }

  function zoomTo(items) {
    // Matches in view, no more stretched than the screen is.
    const box = fitRange(items, 3);
    const [w, h] = plotSize();
    const rows = Math.max(box.y[1] - box.y[0], (box.x[1] - box.x[0]) * h / w, 12);
    state.range = square([(box.x[0] + box.x[1]) / 2, (box.y[0] + box.y[1]) / 2], rows);
  }

  function centerOn(item) {
    state.range = square(position(item), Math.min(state.range.y[1] - state.range.y[0], 40));
  }

  // -- interaction --------------------------------------------------------------------------

  function keepInPlace(item, change) {
    // The clicked item stays where it was on screen while rows appear or vanish around it.
    const before = position(item)[1];
    change();
    view = computeView();
    const shift = position(item)[1] - before;
    state.range.y = [state.range.y[0] + shift, state.range.y[1] + shift];
  }

  function expand(g) {
    const head = groups.head[g];
    keepInPlace(head, function () { state.collapsed[g] = 0; });
    select(-(g + 1));
  }

  function collapse(g) {
    keepInPlace(groups.head[g], function () {
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
    for (let g = nodes.group[v]; g >= 0; g = groups.parent[g]) state.collapsed[g] = 0;
    view = computeView();
  }

  function jumpTo(v) {
    reveal(v);
    state.selected = v;
    centerOn(v);
    showDetails(v);
    draw();
  }

  function select(item) {
    state.selected = item;
    showDetails(item);
    draw();
  }

  // Clicks are hit-tested here, not taken from plotly_click: in pan mode Plotly recomputes
  // the hovered point on mouseup against its full-window drag cover, so a click could land
  // on a point far from the pointer, or on none.
  let pressedAt = null;

  function onPress(event) {
    // Only presses on the plotting area itself, not on the mode bar or the colour bar.
    const onArea = event.target.classList && event.target.classList.contains("nsewdrag");
    pressedAt = onArea ? [event.clientX, event.clientY] : null;
  }

  function onClick(event) {
    const press = pressedAt;
    pressedAt = null;
    if (!press || Math.hypot(event.clientX - press[0], event.clientY - press[1]) > 4) return; // a pan
    const item = itemAt(event.clientX, event.clientY);
    if (item === null) return;
    if (isGroup(item) && state.collapsed[groupIndex(item)]) expand(groupIndex(item));
    else select(item);
  }

  function toClient(item) {
    // From the plotting area's box and the axes' ranges as the page sees them: Plotly's own
    // pixel mapping is in flux between mousedown and click.
    const [x, y] = position(item);
    const area = plot.querySelector(".nsewdrag").getBoundingClientRect();
    const xr = plot.layout.xaxis.range, yr = plot.layout.yaxis.range;
    return [
      area.left + (x - xr[0]) / (xr[1] - xr[0]) * area.width,
      area.top + (yr[1] - y) / (yr[1] - yr[0]) * area.height,
    ];
  }

  function itemAt(clientX, clientY) {
    let best = null, bestDistance = 12; // px: about a marker's radius, and a little more
    view.items.forEach(function (item) {
      const [px, py] = toClient(item);
      const distance = Math.hypot(px - clientX, py - clientY);
      if (distance < bestDistance) { best = item; bestDistance = distance; }
    });
    return best;
  }

  function onRelayout() {
    const xr = plot.layout.xaxis.range, yr = plot.layout.yaxis.range;
    if (!xr || !yr) return;
    state.range = { x: xr.slice(), y: yr.slice() };
    const labels = labelTrace();
    window.Plotly.restyle(plot, { x: [labels.x], y: [labels.y], text: [labels.text] }, [LABELS_TRACE]);
  }

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
    if (state.matches.length) zoomTo(matchItems());
    draw();
  }

  function nextMatch() {
    if (!state.matches.length) return;
    state.cursor = (state.cursor + 1) % state.matches.length;
    searchStatus.textContent = (state.cursor + 1) + " of " + state.matches.length;
    jumpTo(state.matches[state.cursor]);
  }

  // -- details panel ------------------------------------------------------------------------

  function el(tag, attrs) {
    const node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    for (let i = 2; i < arguments.length; i++) {
      const child = arguments[i];
      if (child !== null && child !== undefined) node.append(child);
    }
    return node;
  }

  function button(text, onclick, cls) {
    const b = el("button", { type: "button", class: cls || "link-button" }, text);
    b.addEventListener("click", onclick);
    return b;
  }

  function nodeLink(v) {
    return button(nodes.name[v], function () { jumpTo(v); });
  }

  function figureTable(item, extra) {
    const rows = extra.slice();
    data.metrics.forEach(function (m) {
      if (m.kind !== "categorical") rows.push([m.label, metricText(m, item)]);
    });
    return el("table", { class: "grid compact" }, el("tbody", null, ...rows.map(function (r) {
      return el("tr", null, el("th", null, r[0]), el("td", { class: "num" }, r[1]));
    })));
  }

  function tensorList(title, tensors, link) {
    const list = el("ul", { class: "tensors" });
    tensors.forEach(function (t) {
      if (t) list.append(el("li", null, el("code", null, t), " ", ...link(t)));
    });
    return [el("h4", null, title), list];
  }

  function showDetails(item) {
    details.replaceChildren();
    if (isGroup(item)) return showGroup(groupIndex(item));
    const v = item;
    const g = nodes.group[v];
    details.append(
      el("h3", { class: "node-name" }, nodes.name[v]),
      el("p", { class: "op" }, nodes.op_type[v], nodes.costed[v] ? null : " · not costed"),
      g >= 0 ? el("p", null, "In " + groups.kind[g] + " ", el("b", null, groups.label[g]), " ",
        button("Collapse", function () { collapse(g); }, "small")) : null,
      figureTable(v, [
        ["output shape", shapeText(v)],
        ["MACs", si(nodes.macs[v])],
        ["bytes read", si(nodes.bytes_read[v], "B")],
        ["bytes written", si(nodes.bytes_written[v], "B")],
      ]),
      ...tensorList("Inputs", nodes.inputs[v], function (t) {
        return producer.has(t) ? ["from ", nodeLink(producer.get(t))] : ["(model input or weight)"];
      }),
      ...tensorList("Outputs", nodes.outputs[v], function (t) {
        const to = consumers.get(t) || [];
        return to.length ? ["to "].concat(...to.map(function (c) { return [nodeLink(c), " "]; })) : ["(model output)"];
      }),
      el("h4", null, "Neighbours"),
      el("p", { class: "neighbours" }, "↑ ", ...preds[v].map(nodeLink), el("br"), "↓ ", ...succs[v].map(nodeLink)),
    );
  }

  function showGroup(g) {
    const shut = state.collapsed[g];
    const parent = groups.parent[g];
    details.append(
      el("h3", null, groups.label[g]),
      el("p", { class: "op" }, groups.kind[g] + " of " + groups.size[g] + " nodes"),
      button(shut ? "Expand" : "Collapse", function () { return shut ? expand(g) : collapse(g); }, "small"),
      parent >= 0 ? el("p", null, "In " + groups.kind[parent] + " ", el("b", null, groups.label[parent]), " ",
        button("Collapse", function () { collapse(parent); }, "small")) : null,
      figureTable(-(g + 1), [["op type (heaviest)", metricText(metrics.op_type, -(g + 1))]]),
      el("p", null, "Starts at ", nodeLink(groups.head[g])),
    );
  }

  // -- start ------------------------------------------------------------------------------

  function webglAvailable() {
    try {
      return !!document.createElement("canvas").getContext("webgl");
    } catch (e) {
      return false;
    }
  }

  metricSelect.value = state.metric;
  metricSelect.addEventListener("change", function () { state.metric = metricSelect.value; draw(); });
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
    view = computeView();
    if (state.selected === null) state.range = initialRange();
    else centerOn(state.selected);
    draw();
  }
  document.getElementById("graph-expand-all").addEventListener("click", function () { setAll(0); });
  document.getElementById("graph-collapse-all").addEventListener("click", function () { setAll(1); });
  document.getElementById("graph-fit").addEventListener("click", function () {
    state.range = fitRange(view.items, 1); draw();
  });

  function debounce(fn, ms) {
    let timer = null;
    return function () { clearTimeout(timer); timer = setTimeout(fn, ms); };
  }

  // For tests and for links from other views: where a node is drawn, in client pixels.
  window.workbenchGraph = {
    locate: function (name) {
      const v = nodes.name.indexOf(name);
      if (v < 0) return null;
      const [x, y] = toClient(view.itemOf[v]);
      return { x: x, y: y };
    },
    jumpTo: function (name) { const v = nodes.name.indexOf(name); if (v >= 0) jumpTo(v); },
  };

  state.range = initialRange();
  draw().then(function () {
    plot.addEventListener("mousedown", onPress, true);
    document.addEventListener("click", onClick, true);
    plot.on("plotly_relayout", onRelayout);
    onRelayout();
    requestAnimationFrame(function () {
      root.dataset.renderMs = Math.round(performance.now() - started);
      root.dataset.readyAtMs = Math.round(performance.now()); // since navigation began
      root.dataset.ready = "1";
    });
  });
})();
