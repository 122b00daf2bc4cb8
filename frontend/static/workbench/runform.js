// The new-run form shows the options of the ticked stages only (all of them without JS).
(function () {
  var form = document.getElementById("run-form");
  if (!form) return;
  var boxes = form.querySelectorAll('input[name="stages"]');
  function sync() {
    boxes.forEach(function (box) {
      var group = document.getElementById("options-" + box.value);
      if (group) group.hidden = !box.checked;
    });
    var hint = document.getElementById("options-hint");
    if (hint) hint.hidden = Array.prototype.some.call(boxes, function (b) {
      var group = document.getElementById("options-" + b.value);
      return b.checked && group;
    });
  }
  boxes.forEach(function (box) { box.addEventListener("change", sync); });
  sync();
})();
