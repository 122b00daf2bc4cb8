// Every page of a signed-in user follows their runs over one websocket: a run's status
// and progress wherever the page shows it ([data-live-run] elements), and a notice when a
// run finishes or fails while the page is open. Other scripts (the dashboard) listen to
// the same socket through document events: "workbench:run" (a run's snapshot),
// "workbench:open" (connected again: refresh what may have changed meanwhile) and
// "workbench:live" (the connection's state, for a live indicator).
(function () {
  if (!document.body.dataset.user) return;
  var terminal = ["succeeded", "failed", "cancelled"];
  var known = {};
  var area = document.createElement("div");
  area.id = "notices";
  area.setAttribute("role", "status");
  area.setAttribute("aria-live", "polite");
  document.body.appendChild(area);

  function notice(run) {
    var item = document.createElement("div");
    item.className = "notice notice-" + run.status;
    var link = document.createElement("a");
    link.href = "/runs/" + run.id + "/";
    link.textContent = "Run #" + run.id + " " + run.status;
    item.appendChild(link);
    if (run.error_message) item.appendChild(document.createTextNode(": " + run.error_message));
    var close = document.createElement("button");
    close.type = "button";
    close.className = "link";
    close.setAttribute("aria-label", "dismiss");
    close.textContent = "×";
    close.addEventListener("click", function () { item.remove(); });
    item.appendChild(close);
    area.appendChild(item);
    setTimeout(function () { item.remove(); }, 30000);
  }

  function show(run) {
    document.querySelectorAll('[data-live-run="' + run.id + '"]').forEach(function (el) {
      if (el.dataset.field === "status") {
        el.textContent = run.status;
        el.className = "status status-" + run.status;
      } else if (el.dataset.field === "progress") {
        el.textContent = Math.round(100 * run.progress) + "%";
      }
    });
  }

  function apply(message) {
    var run = message.run;
    var before = known[run.id];
    // An end is final (a retry is a new run): a snapshot taken before it and delivered
    // after it (a worker's last progress racing the web's cancel) must not revive the run.
    if (terminal.indexOf(before) >= 0 && terminal.indexOf(run.status) < 0) return;
    known[run.id] = run.status;
    show(run);
    var ended = terminal.indexOf(run.status) >= 0;
    var wasOpen = message.type === "progress" && terminal.indexOf(before) < 0;
    if (ended && wasOpen) notice(run);
    document.dispatchEvent(new CustomEvent("workbench:run", { detail: run }));
  }

  // A page that learned of an end another way (the dashboard re-reading a row the feed
  // went quiet about) says so here, so the notice is not lost with the event.
  document.addEventListener("workbench:ended", function (event) {
    var run = event.detail;
    if (terminal.indexOf(known[run.id]) >= 0) return;  // already noticed
    known[run.id] = run.status;
    notice(run);
  });

  function state(text) {
    document.dispatchEvent(new CustomEvent("workbench:live", { detail: text }));
  }

  var retryMs = 1000;
  function connect() {
    var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    var ws = new WebSocket(scheme + window.location.host + "/ws/dashboard/");
    ws.onopen = function () {
      retryMs = 1000;
      state("live");
      document.dispatchEvent(new CustomEvent("workbench:open"));
    };
    ws.onmessage = function (event) { apply(JSON.parse(event.data)); };
    ws.onclose = function (event) {
      state("reconnecting…");
      setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, 15000);
    };
  }
  connect();
})();
