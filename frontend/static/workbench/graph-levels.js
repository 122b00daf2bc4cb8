// The graph explorer's model: the hierarchy (every node's name, op and innermost group;
// the groups' nesting), the levels laid out so far (the top, and the inside of each group
// opened once), which groups are open, and where everything open is drawn.
//
// The server lays out each level on its own (frontend/figures/graph/levels.py) when it is
// first opened, and keeps it. Here an open group's level is placed inside the group's box:
// the group's layer of its parent level grows as many rows as the inside needs, and its
// column as wide (every item sharing the column moves with it, so straight chains stay
// straight), recursively. Opening a group is one fetch of that level (or none) and one
// pass over what is open. graph.js draws the result.
(function () {
  "use strict";
  const PAD = 0.35; // layout units beside an open group's inside, each side

  window.WorkbenchGraphLevels = function (data, fetchLevels) {
    const nodes = data.nodes, N = nodes.name.length, G = data.groups.parent.length;
    const parent = data.groups.parent, innermost = nodes.group;
    const model = {
      N: N, G: G,
      name: nodes.name,
      opType: nodes.op.map(function (c) { return data.ops[c]; }),
      innermost: innermost,
      groups: {
        parent: parent,
        kind: data.groups.kind.map(function (k) { return data.kinds[k]; }),
        size: data.groups.size,
        label: new Array(G).fill(null),
        first: new Array(G).fill(null),
      },
      cols: {}, // per node, filled as levels load
      metrics: data.metrics,
      levels: new Map(), // group (-1: the top) -> level
      open: new Uint8Array(G),
      inEdges: new Map(), outEdges: new Map(), // node -> [{u or v, tensors}]
    };
    ["attributes", "inputs", "outputs", "shapes", "output_bytes", "macs", "bytes_read",
      "bytes_written", "costed", "weight"].forEach(function (k) { model.cols[k] = new Array(N); });
    data.metrics.forEach(function (m) {
      if (m.names) return; // a stage overlay: by node name, see addOverlay
      m.values = new Array(N).fill(null);
      m.group_values = new Array(G).fill(null);
    });

    function addLevel(L) {
      if (model.levels.has(L.group)) return;
      model.levels.set(L.group, L);
      L.layers = 0;
      L.layer.forEach(function (l) { if (l + 1 > L.layers) L.layers = l + 1; });
      const c = L.nodes;
      c.index.forEach(function (v, i) {
        Object.keys(model.cols).forEach(function (k) { model.cols[k][v] = c[k][i]; });
      });
      L.groups.index.forEach(function (g, i) {
        model.groups.label[g] = L.groups.label[i];
        model.groups.first[g] = L.groups.first[i];
      });
      data.metrics.forEach(function (m) {
        const values = L.values[m.key];
        if (!values || m.names) return;
        L.items.forEach(function (item, i) {
          if (item >= 0) m.values[item] = values[i]; else m.group_values[-item - 1] = values[i];
        });
      });
      L.raw.forEach(function (pairs) {
        pairs.forEach(function (p) {
          push(model.outEdges, p[0], { v: p[1], tensors: p[2] });
          push(model.inEdges, p[1], { u: p[0], tensors: p[2] });
        });
      });
    }
    function push(map, key, value) {
      const list = map.get(key);
      if (list) list.push(value); else map.set(key, [value]);
    }
    (data.levels || []).forEach(addLevel);
    (data.open || []).forEach(function (g) { if (model.levels.has(g)) model.open[g] = 1; });

    model.addOverlay = function (m) {
      // A stage's values by node name: put them in node order, aggregate them per group.
      const index = new Map();
      model.name.forEach(function (name, v) { index.set(name, v); });
      const values = new Array(N).fill(null);
      m.names.forEach(function (name, i) { const v = index.get(name); if (v !== undefined) values[v] = m.values[i]; });
      m.values = values;
      const out = new Array(G).fill(null), counts = new Array(G).fill(null);
      for (let v = 0; v < N; v++) {
        const value = values[v];
        if (value === null || value === undefined) continue;
        for (let g = innermost[v]; g >= 0; g = parent[g]) {
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
    };

    // -- loading and opening ------------------------------------------------------------

    model.isOpen = function (g) { return model.open[g] === 1 && model.levels.has(g); };

    model.load = function (groups) {
      // Levels not loaded yet, in one request; resolves when they are in.
      const missing = groups.filter(function (g) { return !model.levels.has(g); });
      if (!missing.length) return Promise.resolve();
      if (!fetchLevels) return Promise.reject(new Error("level " + missing[0] + " is not in the page"));
      return fetchLevels(missing).then(function (sent) { sent.levels.forEach(addLevel); });
    };

    model.loadAll = function () {
      if (model.levels.size === G + 1) return Promise.resolve();
      if (!fetchLevels) return Promise.resolve();
      return fetchLevels(null).then(function (sent) { sent.levels.forEach(addLevel); });
    };

    model.ancestors = function (v) { // outermost first
      const chain = [];
      for (let g = innermost[v]; g >= 0; g = parent[g]) chain.unshift(g);
      return chain;
    };

    model.groupAncestors = function (g) {
      const chain = [];
      for (let p = parent[g]; p >= 0; p = parent[p]) chain.unshift(p);
      return chain;
    };

    model.isInside = function (c, g) {
      for (let p = parent[c]; p >= 0; p = parent[p]) if (p === g) return true;
      return false;
    };

    // -- where everything open is drawn -----------------------------------------------------

    model.computeView = function () {
      // top[g]: the outermost group around g (g included) that is not open, or -1.
      const top = new Int32Array(G);
      for (let g = 0; g < G; g++) { // parents come before their children
        const p = parent[g];
        top[g] = p >= 0 && top[p] >= 0 ? top[p] : (model.isOpen(g) ? -1 : g);
      }
      function itemOf(v) {
        const g = innermost[v];
        return g >= 0 && top[g] >= 0 ? -(top[g] + 1) : v;
      }
      const sizes = new Map();
      measure(-1, sizes);
      const items = [], x = [], row = [], frames = [], placed = [];
      place(-1, 0, 0, 0);

      function place(g, x0, r0, depth) {
        const L = model.levels.get(g), s = sizes.get(g);
        placed.push({ L: L, s: s, x0: x0 - s.minL, r0: r0 });
        L.items.forEach(function (item, i) {
          const X = x0 - s.minL + s.f(L.x[i]), R = r0 + s.rowStart[L.layer[i]];
          const c = item < 0 ? -item - 1 : -1;
          if (c >= 0 && model.isOpen(c)) {
            const inner = sizes.get(c);
            frames.push({ g: c, x0: X - inner.w / 2, x1: X + inner.w / 2, r0: R, r1: R + inner.h - 1, depth: depth });
            place(c, X - inner.w / 2, R, depth + 1);
          } else {
            items.push(item); x.push(X); row.push(R);
          }
        });
      }

      const M = items.length, rows = sizes.get(-1).h;
      const rowStart = new Int32Array(rows + 1);
      for (let i = 0; i < M; i++) rowStart[row[i] + 1] += 1;
      for (let r = 0; r < rows; r++) rowStart[r + 1] += rowStart[r];
      const fill = rowStart.slice(0, rows), byRow = new Int32Array(M);
      for (let i = 0; i < M; i++) byRow[fill[row[i]]++] = i;
      const indexOf = new Map();
      items.forEach(function (item, i) { indexOf.set(item, i); });
      const view = { items: items, itemOf: itemOf, rows: rows, x: x, row: row, rowStart: rowStart,
        byRow: byRow, indexOf: indexOf, frames: frames };
      view.edges = edgeLines(view, placed);
      return view;
    };

    function measure(g, sizes) {
      // The size of an open level (width in layout units, height in rows), its rows per
      // layer and its columns' spread, its open groups measured first.
      const L = model.levels.get(g);
      const tall = new Int32Array(L.layers).fill(1);
      const spread = new Map(); // column x -> half width of the widest open group in it
      L.items.forEach(function (item, i) {
        const c = -item - 1;
        if (item >= 0 || !model.isOpen(c)) return;
        const inner = measure(c, sizes);
        tall[L.layer[i]] = Math.max(tall[L.layer[i]], inner.h);
        spread.set(L.x[i], Math.max(spread.get(L.x[i]) || 0, inner.w / 2 + PAD));
      });
      const rowStart = new Int32Array(L.layers + 1);
      for (let l = 0; l < L.layers; l++) rowStart[l + 1] = rowStart[l] + tall[l];
      const columns = Array.from(spread.keys()).sort(function (a, b) { return a - b; });
      const before = [0]; // widening left of each column
      columns.forEach(function (c, k) { before.push(before[k] + 2 * spread.get(c)); });
      function f(x) {
        let lo = 0, hi = columns.length; // columns left of x
        while (lo < hi) { const mid = (lo + hi) >> 1; if (columns[mid] < x) lo = mid + 1; else hi = mid; }
        return x + before[lo] + (columns[lo] === x ? spread.get(x) : 0);
      }
      let minL = Infinity, maxR = -Infinity;
      L.items.forEach(function (item, i) {
        const half = spread.has(L.x[i]) && item < 0 && model.isOpen(-item - 1) ? spread.get(L.x[i]) : 0.5;
        minL = Math.min(minL, f(L.x[i]) - half); maxR = Math.max(maxR, f(L.x[i]) + half);
      });
      L.bends.forEach(function (bend) {
        bend.forEach(function (b) { minL = Math.min(minL, f(b) - 0.5); maxR = Math.max(maxR, f(b) + 0.5); });
      });
      const s = { w: maxR - minL, h: rowStart[L.layers], rowStart: rowStart, tall: tall, f: f, minL: minL };
      sizes.set(g, s);
      return s;
    }

    function edgeLines(view, placed) {
      // Polylines between visible items, through the bends of the level whose edge they
      // are (once per pair of items): down through a tall layer, then on.
      const px = [], py = [], start = [0], from = [], to = [], raw = [], lo = [], hi = [], left = [], right = [];
      const seen = new Set(), span = N + G + 2;
      placed.forEach(function (p) {
        const L = p.L, s = p.s;
        for (let e = 0; e < L.raw.length; e++) {
          const a = L.edges[2 * e], b = L.edges[2 * e + 1], bend = L.bends[e];
          L.raw[e].forEach(function (pair) {
            const turned = pair.length > 3;
            const A = view.itemOf(turned ? pair[1] : pair[0]), B = view.itemOf(turned ? pair[0] : pair[1]);
            const key = (A + G + 1) * span + (B + G + 1);
            if (A === B || seen.has(key)) return;
            seen.add(key);
            const ia = view.indexOf.get(A), ib = view.indexOf.get(B);
            if (ia === undefined || ib === undefined) return;
            const first = px.length;
            px.push(view.x[ia]); py.push(view.row[ia]);
            const la = L.layer[a];
            if (L.items[a] === A && s.tall[la] > 1) { px.push(view.x[ia]); py.push(p.r0 + s.rowStart[la] + s.tall[la] - 1); }
            for (let k = 0; k < bend.length; k++) {
              const l = la + 1 + k, bx = p.x0 + s.f(bend[k]);
              px.push(bx); py.push(p.r0 + s.rowStart[l]);
              if (s.tall[l] > 1) { px.push(bx); py.push(p.r0 + s.rowStart[l] + s.tall[l] - 1); }
            }
            px.push(view.x[ib]); py.push(view.row[ib]);
            let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
            for (let q = first; q < px.length; q++) {
              x0 = Math.min(x0, px[q]); x1 = Math.max(x1, px[q]);
              y0 = Math.min(y0, py[q]); y1 = Math.max(y1, py[q]);
            }
            start.push(px.length);
            from.push(A); to.push(B); raw.push(pair);
            lo.push(y0); hi.push(y1); left.push(x0); right.push(x1);
          });
        }
      });
      return { x: px, y: py, start: start, from: from, to: to, raw: raw, lo: lo, hi: hi, left: left, right: right };
    }

    return model;
  };
})();
