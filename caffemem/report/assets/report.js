
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg", W = 1200, LEFT = 210, RIGHT = 20;
  var STYLE_NAMES = { data: "data (activations)", diff: "diff (gradients)", param: "parameters", buffer: "layer buffers", held: "allocated, no live value" };

  function svgEl(name, attrs, parent, text) {
    var node = document.createElementNS(NS, name);
    for (var key in attrs) node.setAttribute(key, attrs[key]);
    if (text !== undefined) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }
  function fmt(bytes) {
    var a = Math.abs(bytes);
    if (a >= 1073741824) return (bytes / 1073741824).toFixed(2) + " GiB";
    if (a >= 1048576) return (bytes / 1048576).toFixed(1) + " MiB";
    if (a >= 1024) return (bytes / 1024).toFixed(1) + " KiB";
    return bytes + " B";
  }
  function niceStep(raw) {
    var mag = Math.pow(10, Math.floor(Math.log10(raw))), steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) if (steps[i] * mag >= raw) return steps[i] * mag;
    return 10 * mag;
  }
  function scaleX(n) { var span = W - LEFT - RIGHT; return function (s) { return LEFT + span * s / n; }; }
  function legend(host, entries) {
    var box = document.createElement("div");
    box.className = "legend";
    entries.forEach(function (e) {
      var item = document.createElement("span"), swatch = document.createElement("i");
      swatch.style.background = e.color;
      item.appendChild(swatch);
      item.appendChild(document.createTextNode(e.text));
      box.appendChild(item);
    });
    host.appendChild(box);
  }
  // The phases of the run as shaded columns, with the step axis below them.
  function stepAxis(svg, d, x, top, bottom) {
    var n = d.steps.length, g = svgEl("g", { "class": "axis" }, svg);
    var fwd = d.kinds.indexOf("f"), bwd = d.kinds.indexOf("b");
    var regions = [[0, fwd < 0 ? n : fwd, "#eef0f4", "init"], [fwd, bwd < 0 ? n : bwd, "#f7f9fc", "Forward →"], [bwd, n, "#fbf6f1", "← Backward"]];
    regions.forEach(function (r) {
      if (r[0] < 0 || r[1] <= r[0]) return;
      svgEl("rect", { x: x(r[0]), y: top, width: x(r[1]) - x(r[0]), height: bottom - top, fill: r[2] }, g);
      if (r[3] !== "init" || x(r[1]) - x(r[0]) > 30) svgEl("text", { x: x(r[0]) + 4, y: top + 12 }, g, r[3]);
    });
    var every = Math.max(1, niceStep(n / 12));
    for (var s = 0; s < n; s += every) {
      svgEl("line", { x1: x(s + 0.5), x2: x(s + 0.5), y1: bottom, y2: bottom + 4, stroke: "#9ca3af" }, g);
      svgEl("text", { x: x(s + 0.5), y: bottom + 16, "text-anchor": "middle" }, g, String(s));
    }
    svgEl("text", { x: LEFT - 8, y: bottom + 16, "text-anchor": "end" }, g, "step");
    return g;
  }
  function stepPath(values, x, y, n, closed) {
    var p = "M" + x(0) + "," + (closed ? y(0) : y(values[0]));
    for (var s = 0; s < n; s++) p += (closed || s ? "V" + y(values[s]) : "") + "H" + x(s + 1);
    return closed ? p + "V" + y(0) + "Z" : p;
  }

  function drawTimeline(host, d) {
    var n = d.steps.length, H = 340, top = 24, bottom = H - 34, x = scaleX(n), drawn = 0;
    var max = d.lowerBound || 0;
    d.series.forEach(function (s) { s.values.forEach(function (v) { if (v > max) max = v; }); });
    max = max > 0 ? max * 1.06 : 1;
    var y = function (v) { return bottom - (bottom - top) * v / max; };
    var colors = { stock: "var(--stock)", planned: "var(--planned)", live: "var(--live)" };
    legend(host, d.series.map(function (s) {
      return { color: colors[s.style], text: s.name + " — " + s.end + " at the end" };
    }).concat(d.lowerBound ? [{ color: "var(--bound)", text: "lower bound for a plan — " + d.lowerBoundText + " (dashed)" }] : []));
    var svg = svgEl("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "bytes after each step" });
    host.appendChild(svg);
    stepAxis(svg, d, x, top, bottom);
    var unit = max >= 1073741824 ? 1073741824 : max >= 1048576 ? 1048576 : max >= 1024 ? 1024 : 1;
    var grid = svgEl("g", { "class": "axis" }, svg), tick = niceStep(max / unit / 6) * unit;
    for (var v = 0; v <= max; v += tick) {
      svgEl("line", { x1: LEFT, x2: W - RIGHT, y1: y(v), y2: y(v), "class": "grid" }, grid);
      svgEl("text", { x: LEFT - 8, y: y(v) + 4, "text-anchor": "end" }, grid, fmt(v));
    }
    d.series.slice().reverse().forEach(function (s) {
      svgEl("path", { d: stepPath(s.values, x, y, n, s.style === "live"), "class": s.style }, svg);
      drawn++;
    });
    if (d.lowerBound) { svgEl("line", { x1: LEFT, x2: W - RIGHT, y1: y(d.lowerBound), y2: y(d.lowerBound), "class": "bound" }, svg); drawn++; }
    var px = x(d.peak.step + 0.5), py = y(d.peak.bytes), right = px > LEFT + (W - LEFT) * 0.6;
    svgEl("line", { x1: px, x2: px, y1: top, y2: bottom, "class": "marker" }, svg);
    svgEl("circle", { cx: px, cy: py, r: 5, fill: "var(--live)", stroke: "#fff", "stroke-width": 2 }, svg);
    var label = svgEl("text", { x: px + (right ? -8 : 8), y: top + 30, "text-anchor": right ? "end" : "start", "font-weight": "600" }, svg, d.peak.label);
    label.setAttribute("paint-order", "stroke");
    label.setAttribute("stroke", "#fff");
    label.setAttribute("stroke-width", "4");
    // Hover: a guide line and the step's figures.
    var guide = svgEl("line", { y1: top, y2: bottom, "class": "guide", visibility: "hidden" }, svg);
    var tip = document.createElement("div");
    tip.className = "tip";
    host.appendChild(tip);
    svg.addEventListener("mousemove", function (ev) {
      var box = svg.getBoundingClientRect(), sx = (ev.clientX - box.left) * W / box.width;
      var s = Math.floor((sx - LEFT) / (W - LEFT - RIGHT) * n);
      if (s < 0 || s >= n) { guide.setAttribute("visibility", "hidden"); tip.style.display = "none"; return; }
      guide.setAttribute("x1", x(s + 0.5)); guide.setAttribute("x2", x(s + 0.5)); guide.setAttribute("visibility", "visible");
      tip.textContent = "";
      [["step " + s + ": " + d.steps[s], true]].concat(d.series.map(function (se) { return [se.name.split(" (")[0] + ": " + fmt(se.values[s]), false]; })).forEach(function (line) {
        var div = document.createElement("div");
        div.textContent = line[0];
        if (line[1]) div.style.fontWeight = "600";
        tip.appendChild(div);
      });
      tip.style.display = "block";
      var hostBox = host.getBoundingClientRect(), left = ev.clientX - hostBox.left + 14;
      if (left + tip.offsetWidth > hostBox.width) left = ev.clientX - hostBox.left - tip.offsetWidth - 14;
      tip.style.left = left + "px";
      tip.style.top = (ev.clientY - hostBox.top + 12) + "px";
    });
    svg.addEventListener("mouseleave", function () { guide.setAttribute("visibility", "hidden"); tip.style.display = "none"; });
    host.setAttribute("data-rendered", String(drawn));
  }

  function drawGantt(host, d) {
    var rows = d.gantt, n = d.steps.length, x = scaleX(n), drawn = 0;
    if (!rows.length) {
      var p = document.createElement("p");
      p.className = "note";
      p.textContent = "Nothing to draw: no storage is shared.";
      host.appendChild(p);
      host.setAttribute("data-rendered", "0");
      return;
    }
    var styles = {};
    rows.forEach(function (r) { r.bars.forEach(function (b) { styles[b[4]] = true; }); });
    legend(host, Object.keys(styles).map(function (s) { return { color: "var(--" + s + ")", text: STYLE_NAMES[s] || s }; }));
    // Heights in proportion to bytes: the largest row at most 220 px, all rows about 720 px.
    var biggest = 1, sum = 0;
    rows.forEach(function (r) { biggest = Math.max(biggest, r.bytes); sum += r.bytes; });
    var perByte = Math.min(220 / biggest, 720 / Math.max(sum, 1));
    var heights = rows.map(function (r) { return Math.max(14, Math.round(r.bytes * perByte)); });
    var top = 22, gap = 3, total = heights.reduce(function (a, b) { return a + b + gap; }, 0), bottom = top + total;
    var svg = svgEl("svg", { viewBox: "0 0 " + W + " " + (bottom + 26), role: "img", "aria-label": "storage lifetimes" });
    host.appendChild(svg);
    stepAxis(svg, d, x, top - 18, bottom);
    var bars = svgEl("g", { "class": "bars" }, svg), rowTop = top;
    rows.forEach(function (r, i) {
      var h = heights[i];
      svgEl("rect", { x: LEFT, y: rowTop, width: W - LEFT - RIGHT, height: h, fill: i % 2 ? "rgba(0,0,0,.025)" : "rgba(0,0,0,.05)" }, svg);
      var text = r.label.length > 30 ? r.label.slice(0, 29) + "…" : r.label;
      var label = svgEl("text", { x: LEFT - 8, y: rowTop + Math.min(h / 2 + 4, 14), "text-anchor": "end" }, svg, text);
      svgEl("title", {}, label, r.title);
      r.bars.forEach(function (b) {
        var rect = svgEl("rect", { x: x(b[0]), y: rowTop + b[2] * h, width: Math.max(1, x(b[1] + 1) - x(b[0])), height: Math.max(1, b[3] * h), "class": b[4] }, bars);
        svgEl("title", {}, rect, b[5]);
        drawn++;
      });
      rowTop += h + gap;
    });
    var px = x(d.peak.step + 0.5);
    svgEl("line", { x1: px, x2: px, y1: top, y2: bottom, "class": "marker" }, svg);
    host.setAttribute("data-rendered", String(drawn));
  }

  document.querySelectorAll("section.net").forEach(function (section) {
    var d = JSON.parse(section.querySelector("script.data").textContent);
    drawTimeline(section.querySelector(".timeline"), d);
    drawGantt(section.querySelector(".gantt"), d);
  });
})();
