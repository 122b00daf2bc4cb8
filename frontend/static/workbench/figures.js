// Render every Plotly figure whose JSON the server embedded with json_script.
(function () {
  document.querySelectorAll("[data-figure]").forEach(function (el) {
    var source = document.getElementById(el.dataset.figure);
    if (!source || !window.Plotly) return;
    var figure = JSON.parse(source.textContent);
    window.Plotly.newPlot(el, figure.data, figure.layout, { responsive: true, displaylogo: false });
  });
})();
