// Sortable, filterable tables with CSV export, for any <table data-table>:
// click a header to sort (numbers by data-value), type in the filter box above it,
// and "Export CSV" downloads the rows that are shown.
(function () {
  function cellValue(cell) {
    var raw = cell.dataset.value !== undefined ? cell.dataset.value : cell.textContent.trim();
    var num = parseFloat(raw);
    return isNaN(num) || !/^-?[\d.]+(e[-+]?\d+)?$/i.test(raw) ? raw.toLowerCase() : num;
  }

  function toCsv(table) {
    var rows = [table.tHead.rows[0]].concat(
      Array.prototype.filter.call(table.tBodies[0].rows, function (r) { return !r.hidden; })
    );
    return rows.map(function (row) {
      return Array.prototype.map.call(row.cells, function (cell) {
        var text = cell.dataset.value !== undefined ? cell.dataset.value : cell.textContent.trim();
        return '"' + text.replace(/"/g, '""') + '"';
      }).join(",");
    }).join("\n");
  }

  document.querySelectorAll("table[data-table]").forEach(function (table) {
    var body = table.tBodies[0];
    var bar = document.createElement("div");
    bar.className = "table-tools";
    var filter = document.createElement("input");
    filter.type = "search";
    filter.placeholder = "Filter rows (name, op type, …)";
    filter.setAttribute("aria-label", "Filter rows");
    var count = document.createElement("span");
    var csv = document.createElement("button");
    csv.type = "button";
    csv.textContent = "Export CSV";
    bar.append(filter, count, csv);
    table.parentNode.insertBefore(bar, table);

    function shown() {
      var n = Array.prototype.filter.call(body.rows, function (r) { return !r.hidden; }).length;
      count.textContent = n + " of " + body.rows.length + " rows";
    }
    filter.addEventListener("input", function () {
      var q = filter.value.toLowerCase();
      Array.prototype.forEach.call(body.rows, function (row) {
        row.hidden = q && row.textContent.toLowerCase().indexOf(q) < 0;
      });
      shown();
    });
    csv.addEventListener("click", function () {
      var link = document.createElement("a");
      link.href = URL.createObjectURL(new Blob([toCsv(table)], { type: "text/csv" }));
      link.download = (table.dataset.table || "table") + ".csv";
      link.click();
    });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
      th.style.cursor = "pointer";
      th.title = "Sort";
      th.addEventListener("click", function () {
        var dir = th.dataset.dir === "desc" ? 1 : -1;
        Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) { delete h.dataset.dir; });
        th.dataset.dir = dir === 1 ? "asc" : "desc";
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = cellValue(a.cells[col]), y = cellValue(b.cells[col]);
          return (x > y ? 1 : x < y ? -1 : 0) * dir;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
    shown();
  });
})();
