// Render every Plotly figure whose JSON the server embedded with json_script.
(function () {
  document.querySelectorAll("[data-figure]").forEach(function (el) {
    var source = document.getElementById(el.dataset.figure);
    if (!source || !window.Plotly) return;
    var figure = JSON.parse(source.textContent);
    if (figure.empty) {
      // nothing to draw: say why instead of an empty frame (the server's words)
      el.classList.add("figure-empty");
      el.setAttribute("role", "note");
      el.textContent = figure.empty;
      return;
    }
    window.Plotly.newPlot(el, figure.data, figure.layout, { responsive: true, displaylogo: false });
  });
})();
