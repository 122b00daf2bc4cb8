// The new-run form shows the options of the ticked stages only (all of them without JS).
(function () {
  var form = document.getElementById("run-form");
  if (!form) return;
  var boxes = form.querySelectorAll('input[name="stages"]');
  function sync() {
    boxes.forEach(function (box) {
      var group = document.getElementById("options-" + box.value);
      // a group with an error in it stays open, ticked or not: the error must be seen
      if (group) group.hidden = !box.checked && !group.querySelector(".error");
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
