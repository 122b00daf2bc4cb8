// The dashboard follows every run of the user (the page's one websocket is notify.js's):
// progress moves in place, and a run that starts or ends has its row fetched again from
// the server (its answers). After a reconnect, every row still shown as active is
// fetched again: it may have ended meanwhile.
(function () {
  var table = document.getElementById("dashboard-runs");
  var live = document.getElementById("live");

  // One fetch per run at a time; an event that lands meanwhile fetches again afterwards,
  // so a new run gets exactly one row. The row must end at the latest status the feed
  // announced: a fetch that still reads an older state tries again shortly.
  var QUIET_MS = 5000;
  var inFlight = {};
  var latest = {};
  var retries = {};

  function refreshRow(runId) {
    if (inFlight[runId]) { inFlight[runId] = "again"; return; }
    inFlight[runId] = "once";
    var shown = null;
    fetch("/runs/" + runId + "/row/", { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) return;
        var holder = document.createElement("tbody");
        holder.innerHTML = html.trim();
        var row = holder.firstElementChild;
        shown = row.dataset.status;
        var existing = table.querySelector('tr[data-run-id="' + runId + '"]');
        var active = ["queued", "running"];
        if (existing && active.indexOf(existing.dataset.status) >= 0 && active.indexOf(shown) < 0) {
          document.dispatchEvent(new CustomEvent("workbench:ended", {
            detail: { id: Number(runId), status: shown, error_message: row.dataset.error || "" },
          }));
        }
        if (existing) {
          var box = existing.querySelector('input[name="run"]');
          var newBox = row.querySelector('input[name="run"]');
          if (box && newBox) newBox.checked = box.checked;  // keep what was ticked
          existing.replaceWith(row);
        } else {
          table.tBodies[0].prepend(row);
        }
        table.hidden = false;
        var empty = document.getElementById("no-runs");
        if (empty) empty.hidden = true;
        count();
      })
      .finally(function () {
        var again = inFlight[runId] === "again";
        delete inFlight[runId];
        if (again) { refreshRow(runId); return; }
        if (shown !== null && latest[runId] && shown !== latest[runId]) {
          retries[runId] = (retries[runId] || 0) + 1;
          if (retries[runId] <= 10) setTimeout(function () { refreshRow(runId); }, 500);
        } else {
          delete retries[runId];
        }
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

  var heard = {};  // when the feed last said something of each run (ms)

  function apply(run) {
    latest[run.id] = run.status;
    heard[run.id] = Date.now();
    var row = table ? table.querySelector('tr[data-run-id="' + run.id + '"]') : null;
    if (!row || row.dataset.status !== run.status) { refreshRow(run.id); return; }
    var bar = row.querySelector('[data-field="progress"]');
    if (bar) bar.value = run.progress;
    var message = row.querySelector('[data-field="message"]');
    var running = run.stages.filter(function (s) { return s.status === "running"; })[0];
    // nothing running: a queued stage may say it waits for a worker serving its target
    var waiting = run.stages.filter(function (s) { return s.status === "queued" && /^waiting/.test(s.message || ""); })[0];
    if (message && running) message.textContent = running.stage + ": " + (running.message || "running");
    else if (message && waiting) message.textContent = waiting.stage + ": " + waiting.message;
  }

  document.addEventListener("workbench:run", function (event) { apply(event.detail); });
  document.addEventListener("workbench:live", function (event) {
    if (live) { live.textContent = event.detail; live.className = event.detail === "live" ? "live on" : "live"; }
  });
  document.addEventListener("workbench:open", function () {
    table.querySelectorAll('tr[data-status="queued"], tr[data-status="running"]').forEach(
      function (row) { refreshRow(row.dataset.runId); }
    );
  });
  // A lost event must not leave a row behind: an active row the feed has been quiet about
  // for a while is read again from the server.
  setInterval(function () {
    var now = Date.now();
    table.querySelectorAll('tr[data-status="queued"], tr[data-status="running"]').forEach(
      function (row) {
        var id = row.dataset.runId;
        if (now - (heard[id] || 0) > QUIET_MS) { heard[id] = now; refreshRow(id); }
      }
    );
  }, QUIET_MS);
  count();
})();
