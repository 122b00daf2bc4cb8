// Explorers side by side (the model's graph page): the prepared model (#graph), its
// compiled kernels (#kernels) and the upload's own graph (#upload). Selecting a node on one
// side lights up its counterparts on the other: a node's kernel, a kernel's nodes (the map
// comes with the page, from the compile result); between the upload and the prepared model
// the node of the same name (preparation keeps the user's names; a folded node has none).
// Each explorer says what it selected with a "graph:select" event; highlight() lights
// nodes up without answering back.
(function () {
  "use strict";
  const sent = document.getElementById("graph-links");
  if (!sent) return;
  const links = JSON.parse(sent.textContent);
  function same(name) { return [name]; }
  linkTo("graph", "upload", same);
  linkTo("upload", "graph", same);
  function linkTo(fromId, toId, counterparts) {
    const from = document.getElementById(fromId);
    if (!from) return;
    from.addEventListener("graph:select", function (event) {
      const other = (window.workbenchGraphs || {})[toId];
      if (other) other.highlight(counterparts(event.detail.name));
    });
  }
  linkTo("graph", "kernels", function (name) {
    const kernel = links.kernel_of[name];
    return kernel === undefined ? [] : [kernel];
  });
  linkTo("kernels", "graph", function (name) { return links.nodes_of[name] || []; });
})();
