// Live run progress: the page starts from the server's snapshot, then applies every
// snapshot the websocket delivers. When the run ends the page reloads once for results.
(function () {
  var root = document.getElementById("run");
  if (!root) return;
  var runId = root.dataset.runId;
  var initialStatus = root.dataset.status;
  var terminal = ["succeeded", "failed", "cancelled"];
  var live = document.getElementById("live");
  var retryMs = 1000;

  function pct(x) { return Math.round(100 * x) + "%"; }

  function setStatus(el, status) {
    el.textContent = status.replace("_", " ");
    el.className = "status status-" + status;
  }

  function apply(run) {
    setStatus(document.getElementById("run-status"), run.status);
    document.getElementById("run-progress").textContent = pct(run.progress);
    var err = document.getElementById("run-error");
    err.textContent = run.error_message || "";
    err.hidden = !run.error_message;
    run.stages.forEach(function (s) {
      var row = root.querySelector('tr[data-stage="' + s.stage + '"]');
      if (!row) return;
      setStatus(row.querySelector('[data-field="status"]'), s.status);
      row.querySelector('[data-field="progress"]').value = s.progress;
      row.querySelector('[data-field="pct"]').textContent = pct(s.progress);
      row.querySelector('[data-field="message"]').textContent = s.error_message || s.message;
    });
    var done = terminal.indexOf(run.status) >= 0;
    document.getElementById("cancel-form").hidden = done;
    root.dataset.status = run.status;
    if (done && terminal.indexOf(initialStatus) < 0) {
      initialStatus = run.status;  // reload once to show the stage results
      window.location.reload();
    }
  }

  function connect() {
    var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    var ws = new WebSocket(scheme + window.location.host + "/ws/runs/" + runId + "/");
    ws.onopen = function () { live.textContent = "live"; live.className = "live on"; retryMs = 1000; };
    ws.onmessage = function (event) { apply(JSON.parse(event.data).run); };
    ws.onclose = function (event) {
      live.textContent = event.code === 4404 ? "not allowed" : "reconnecting…";
      live.className = "live";
      if (event.code === 4404 || terminal.indexOf(root.dataset.status) >= 0) {
        live.textContent = terminal.indexOf(root.dataset.status) >= 0 ? "finished" : live.textContent;
        return;
      }
      setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, 15000);
    };
  }

  apply(JSON.parse(document.getElementById("run-snapshot").textContent));
  if (terminal.indexOf(initialStatus) < 0) connect(); else live.textContent = "finished";
})();
