// The dashboard follows every run of the user over one websocket: progress moves in place,
// and a run that starts or ends has its row fetched again from the server (its answers).
(function () {
  var table = document.getElementById("dashboard-runs");
  var live = document.getElementById("live");
  var retryMs = 1000;

  // One fetch per run at a time; an event that lands meanwhile fetches again afterwards,
  // so the row ends at the latest state and a new run gets exactly one row.
  var inFlight = {};

  function refreshRow(runId) {
    if (inFlight[runId]) { inFlight[runId] = "again"; return; }
    inFlight[runId] = "once";
    fetch("/runs/" + runId + "/row/", { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) return;
        if (!table) { window.location.reload(); return; }  // the first run: no table yet
        var holder = document.createElement("tbody");
        holder.innerHTML = html.trim();
        var row = holder.firstElementChild;
        var existing = table.querySelector('tr[data-run-id="' + runId + '"]');
        if (existing) existing.replaceWith(row);
        else table.tBodies[0].prepend(row);
        count();
      })
      .finally(function () {
        var again = inFlight[runId] === "again";
        delete inFlight[runId];
        if (again) refreshRow(runId);
      });
  }

  // "3 running · 12 succeeded · 1 failed" over the rows shown, kept current as rows change.
  function count() {
    var counts = document.getElementById("run-counts");
    if (!table || !counts) return;
    var by = {};
    Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
      by[row.dataset.status] = (by[row.dataset.status] || 0) + 1;
    });
    counts.textContent = Object.keys(by).sort().map(function (s) {
      return by[s] + " " + s;
    }).join(" · ") + " (latest " + table.tBodies[0].rows.length + " runs)";
  }

  function apply(run) {
    var row = table ? table.querySelector('tr[data-run-id="' + run.id + '"]') : null;
    if (!row || row.dataset.status !== run.status) { refreshRow(run.id); return; }
    var bar = row.querySelector('[data-field="progress"]');
    if (bar) bar.value = run.progress;
    var message = row.querySelector('[data-field="message"]');
    var running = run.stages.filter(function (s) { return s.status === "running"; })[0];
    if (message && running) message.textContent = running.stage + ": " + (running.message || "running");
  }

  function connect() {
    var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    var ws = new WebSocket(scheme + window.location.host + "/ws/dashboard/");
    ws.onopen = function () { live.textContent = "live"; live.className = "live on"; retryMs = 1000; };
    ws.onmessage = function (event) { apply(JSON.parse(event.data).run); };
    ws.onclose = function (event) {
      live.textContent = event.code === 4404 ? "not allowed" : "reconnecting…";
      live.className = "live";
      if (event.code === 4404) return;
      setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, 15000);
    };
  }

  count();
  if (live) connect();
})();
