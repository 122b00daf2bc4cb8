// One panel at a time: a tab per stage on the run page, overview / graph / runs on the
// model page (every panel shows without JS). The
// address keeps the open tab (#tab-memory), so a link opens it; arrow keys move between
// tabs; figures drawn in a hidden panel are resized when it opens.
(function () {
  var bar = document.querySelector('nav.tabs[role="tablist"]');
  if (!bar) return;
  var tabs = Array.prototype.slice.call(bar.querySelectorAll('[role="tab"]'));
  if (tabs.length < 2) { bar.hidden = true; return; }

  function open(tab, focus, remember) {
    tabs.forEach(function (t) {
      var selected = t === tab;
      t.setAttribute("aria-selected", selected ? "true" : "false");
      t.tabIndex = selected ? 0 : -1;
      document.getElementById(t.getAttribute("aria-controls")).hidden = !selected;
    });
    if (focus) tab.focus();
    if (remember && window.history.replaceState) window.history.replaceState(null, "", "#" + tab.id);
    window.dispatchEvent(new Event("resize"));
  }

  tabs.forEach(function (tab, i) {
    tab.addEventListener("click", function () { open(tab, false, true); });
    tab.addEventListener("keydown", function (event) {
      var step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
      if (!step) return;
      event.preventDefault();
      open(tabs[(i + step + tabs.length) % tabs.length], true, true);
    });
  });
  // The address names a tab, or something inside a panel (#profile-ops): open that one and
  // leave the address as it is, so the anchor still works.
  var wanted = window.location.hash ? document.getElementById(window.location.hash.slice(1)) : null;
  var first = tabs[0];
  if (wanted && tabs.indexOf(wanted) >= 0) first = wanted;
  else if (wanted && wanted.closest('[role="tabpanel"]')) {
    first = document.getElementById(wanted.closest('[role="tabpanel"]').getAttribute("aria-labelledby"));
  }
  open(first, false, false);
  if (wanted && tabs.indexOf(wanted) < 0) wanted.scrollIntoView();
})();
