// trove report's page script: draws what the JSON block above it holds (every figure is computed
// by trove). No library, no network. File text (keys, values) enters the page only as text nodes
// and attribute values, never as markup.
(function () {
  "use strict";

  var root = document.documentElement;
  function recordError(e) {
    root.setAttribute("data-errors", (root.getAttribute("data-errors") || "") + String(e && e.stack || e) + "\n");
  }
  // Each part draws on its own: one failing leaves the others (and says so in data-errors).
  function part(fn) {
    try { fn(); } catch (e) { recordError(e); }
  }

  var D = JSON.parse(document.getElementById("trove-data").textContent);
  var A = D.a, X = D.diff || null;
  // The SVG namespace, from the parser rather than written out.
  var SVG_NS = (function () { var d = document.createElement("div"); d.innerHTML = "<svg></svg>"; return d.firstChild.namespaceURI; })();

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }
  function svg(tag, attrs, parent) {
    var e = document.createElementNS(SVG_NS, tag);
    for (var k in attrs) if (Object.prototype.hasOwnProperty.call(attrs, k)) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function num(v) {  // JSON numbers, or the tags trove writes for others (docs/json.md)
    if (typeof v === "number") return v;
    if (v !== null && typeof v === "object") {
      if (v.$float === "inf") return Infinity;
      if (v.$float === "-inf") return -Infinity;
      if (v.$float === "nan") return NaN;
      if (typeof v.$int === "string") return Number(v.$int);
    }
    return null;
  }
  function fmt(v) {
    v = num(v);
    if (v === null) return "\u2013";
    if (!isFinite(v)) return String(v);
    if (Number.isInteger(v) && Math.abs(v) < 1e6) return String(v);
    var a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(3);
    return String(parseFloat(v.toPrecision(4)));
  }
  function count(n) { return n === null || n === undefined ? "\u2013" : Number(n).toLocaleString("en-US"); }
  function bytes(n) {
    var units = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? String(n) : n.toFixed(1)) + " " + units[i];
  }
  function shape(s) { return "[" + s.join(", ") + "]"; }
  function keyText(k) { return k === "" ? "\"\"" : k; }

  // --- header and summary ---------------------------------------------------------------------
  part(function () {
    document.getElementById("subtitle").textContent = A.path + (X ? "  \u2192  " + X.path : "");
    document.title = "trove report: " + A.path;
    var cards = document.getElementById("cards");
    function card(label, value, detail, cls) {
      var c = el("div", "card" + (cls ? " " + cls : ""));
      c.appendChild(el("div", "label", label));
      c.appendChild(el("div", "value", value));
      if (detail) c.appendChild(el("div", "detail", detail));
      cards.appendChild(c);
    }
    var s = A.summary, total = 0, byDtype = [];
    for (var dt in s.bytes_by_dtype) {
      total += s.bytes_by_dtype[dt];
      byDtype.push(dt + " " + bytes(s.bytes_by_dtype[dt]));
    }
    function some(keys) { return keys.slice(0, 3).map(keyText).join(", ") + (keys.length > 3 ? ", \u2026" : ""); }
    card("format", A.format, bytes(A.file_size) + " file");
    card("tensors", count(s.tensors), count(s.distinct_tensors) + " distinct");
    card("parameters", count(s.parameters));
    card("tensor bytes", bytes(total), byDtype.join(", "));
    card("non-finite", count(s.non_finite.length), some(s.non_finite), s.non_finite.length ? "bad" : "");
    card("all zero", count(s.all_zero.length), some(s.all_zero), s.all_zero.length ? "warn" : "");
    if (s.skipped.length) card("no figures", count(s.skipped.length), some(s.skipped.map(function (x) { return x.key; })), "warn");
    if (X) {
      var changed = X.tensors.filter(function (t) { return t.changed || (num(t.relative) !== 0); }).length;
      card("compared with", X.format, X.path + " (" + bytes(X.file_size) + ")");
      card("changed tensors", count(changed), "of " + count(X.tensors.length) + " in both", changed ? "warn" : "");
    }
    document.getElementById("footer").textContent =
        "Made by " + D.generator + ". Self-contained: nothing here is fetched from anywhere.";
  });

  // --- treemap of bytes by key prefix ------------------------------------------------------------
  // Lays out items (sorted by size, largest first) in the rectangle, rows of squarish cells
  // (Bruls, Huizing and van Wijk's squarified layout).
  function squarify(items, x, y, w, h) {
    var out = [], total = 0, i;
    for (i = 0; i < items.length; i++) total += items[i].size;
    if (total <= 0 || w <= 0 || h <= 0) return out;
    var scale = w * h / total;
    i = 0;
    while (i < items.length) {
      var side = Math.min(w, h), row = [], sum = 0, lo = Infinity, hi = 0, best = Infinity, j = i;
      while (j < items.length) {
        var a = items[j].size * scale, s = sum + a, nlo = Math.min(lo, a), nhi = Math.max(hi, a);
        var worst = Math.max(side * side * nhi / (s * s), s * s / (side * side * nlo));
        if (row.length && worst > best) break;
        best = worst; row.push(a); sum = s; lo = nlo; hi = nhi; j++;
      }
      var thick = sum / side, k, at;
      if (w >= h) {
        for (k = 0, at = y; k < row.length; k++) { out.push({ item: items[i + k], x: x, y: at, w: thick, h: row[k] / thick }); at += row[k] / thick; }
        x += thick; w -= thick;
      } else {
        for (k = 0, at = x; k < row.length; k++) { out.push({ item: items[i + k], x: at, y: y, w: row[k] / thick, h: thick }); at += row[k] / thick; }
        y += thick; h -= thick;
      }
      i = j;
    }
    return out;
  }

  part(function () {
    var box = document.getElementById("treemap");
    var tree = { name: "", size: 0, children: new Map() };
    A.tensors.forEach(function (t) {
      if (t.tied || !(t.nbytes > 0)) return;
      var node = tree, parts = t.key.split(/[\/.]/);
      tree.size += t.nbytes;
      for (var i = 0; i < parts.length; i++) {
        var next = node.children.get(parts[i]);
        if (!next) { next = { name: parts[i], size: 0, children: new Map(), path: (node.path ? node.path + (t.key.charAt(node.path.length)) : "") + parts[i] }; node.children.set(parts[i], next); }
        next.size += t.nbytes;
        node = next;
      }
    });
    if (tree.size === 0) { box.appendChild(el("p", "muted", "No tensor bytes.")); return; }
    var W = Math.max(600, box.clientWidth || 1200), H = 380, HEAD = 15, MAX_RECTS = 6000;
    var canvas = document.createElement("div");
    canvas.innerHTML = "<svg></svg>";
    var s = canvas.firstChild;
    s.setAttribute("viewBox", "0 0 " + W + " " + H);
    s.setAttribute("height", H);
    box.appendChild(s);
    var hues = [212, 28, 145, 350, 265, 48, 187, 310, 95, 5];
    var stack = [{ node: tree, x: 0, y: 0, w: W, h: H, depth: 0, hue: 212 }], rects = 0;
    while (stack.length && rects < MAX_RECTS) {
      var f = stack.pop(), node = f.node;
      // A chain of single children reads as one name (model.encoder.layer -> one box).
      var label = node.path || "";
      while (node.children.size === 1) node = node.children.values().next().value;
      if (node !== f.node) label = node.path;
      var g = f.depth === 0 ? null : svg("g", {}, s);
      if (g) {
        var r = svg("rect", { x: f.x.toFixed(1), y: f.y.toFixed(1), width: Math.max(0, f.w).toFixed(1), height: Math.max(0, f.h).toFixed(1),
                              fill: "hsl(" + f.hue + ",55%," + Math.min(72, 34 + f.depth * 8) + "%)" }, g);
        svg("title", {}, r).textContent = label + "\n" + bytes(node.size);
        rects++;
        if (f.w > 40 && f.h > 13) {
          var parent = f.parentPath || "";
          var name = parent && label.length > parent.length && label.indexOf(parent) === 0 ? label.slice(parent.length + 1) : label;
          var maxChars = Math.floor((f.w - 6) / 6.2);
          var text = name.length > maxChars ? name.slice(0, Math.max(1, maxChars - 1)) + "\u2026" : name;
          svg("text", { x: (f.x + 3).toFixed(1), y: (f.y + 11).toFixed(1) }, g).textContent = text;
        }
      }
      if (node.children.size === 0 || f.w < 24 || f.h < 24 + HEAD || f.depth > 12) continue;
      var top = f.depth === 0 ? 0 : HEAD, pad = f.depth === 0 ? 0 : 2;
      var items = Array.from(node.children.values()).filter(function (c) { return c.size > 0; })
        .sort(function (p, q) { return q.size - p.size; }).map(function (c) { return { node: c, size: c.size }; });
      var laid = squarify(items, f.x + pad, f.y + top, f.w - 2 * pad, f.h - top - pad);
      for (var i = laid.length - 1; i >= 0; i--) {
        var c = laid[i];
        stack.push({ node: c.item.node, x: c.x, y: c.y, w: c.w, h: c.h, depth: f.depth + 1, parentPath: label,
                     hue: f.depth === 0 ? hues[i % hues.length] : f.hue });
      }
    }
  });

  // --- the tensor table -----------------------------------------------------------------------------
  var changeByKey = new Map();
  if (X) X.tensors.forEach(function (t) { changeByKey.set(t.key, t); });

  function histogramSvg(h, width, height, color) {
    var d = document.createElement("div");
    d.innerHTML = "<svg></svg>";
    var s = d.firstChild;
    s.setAttribute("width", width);
    s.setAttribute("height", height);
    s.setAttribute("class", "histogram");
    if (!h) return s;
    var top = 0, n = h.counts.length, bw = width / n;
    h.counts.forEach(function (c) { top = Math.max(top, c); });
    h.counts.forEach(function (c, i) {
      if (!c) return;
      var bh = Math.max(1, c / top * (height - 1));
      svg("rect", { x: (i * bw).toFixed(2), y: (height - bh).toFixed(2), width: Math.max(0.5, bw - 0.4).toFixed(2), height: bh.toFixed(2), fill: color }, s);
    });
    return s;
  }

  var columns = [
    { name: "key", cls: "key", get: function (t) { return t.key; }, show: function (t) { return keyText(t.key); } },
    { name: "dtype", cls: "text", get: function (t) { return t.dtype; } },
    { name: "shape", cls: "text", get: function (t) { return t.shape.reduce(function (p, q) { return p * q; }, 1); }, show: function (t) { return shape(t.shape); } },
    { name: "bytes", get: function (t) { return t.nbytes; }, show: function (t) { return bytes(t.nbytes); } },
    { name: "min", get: function (t) { return num(t.min); }, show: function (t) { return fmt(t.min); } },
    { name: "max", get: function (t) { return num(t.max); }, show: function (t) { return fmt(t.max); } },
    { name: "mean", get: function (t) { return num(t.mean); }, show: function (t) { return fmt(t.mean); } },
    { name: "std", get: function (t) { return num(t.std); }, show: function (t) { return fmt(t.std); } },
    { name: "zeros", get: function (t) { return t.zeros; }, show: function (t) { return count(t.zeros); } },
    { name: "nan", get: function (t) { return t.nan; }, show: function (t) { return count(t.nan); } },
    { name: "inf", get: function (t) { return t.skipped ? null : t.pos_inf + t.neg_inf; }, show: function (t) { return t.skipped ? "\u2013" : count(t.pos_inf + t.neg_inf); } }
  ];
  if (X) columns.push({ name: "change", get: function (t) { var c = changeByKey.get(t.key); return c ? (c.changed ? Infinity : num(c.relative)) : null; },
                        show: function (t) { var c = changeByKey.get(t.key); return !c ? "only here" : c.changed ? c.changed : fmt(c.relative); } });
  columns.push({ name: "histogram", cls: "hist", get: null });

  var rows = A.tensors.map(function (t, i) { return { t: t, index: i, tr: null, detail: null, drawn: false }; });
  var sortColumn = -1, sortDescending = false, visible = rows;
  // The table shows one page of rows at a time, each row built when first shown: a checkpoint of
  // 100,000 tensors would otherwise build 100,000 rows before the page could show anything.
  // Filtering and sorting work on every row; the pager moves through the result.
  var PAGE_ROWS = 500, page = 0;
  var EAGER_SPARKLINES = 100;
  var observer = "IntersectionObserver" in window ? new IntersectionObserver(function (entries) {
    entries.forEach(function (e) {
      if (!e.isIntersecting) return;
      var row = e.target.troveRow;
      observer.unobserve(e.target);
      drawSparkline(row);
    });
  }, { root: document.querySelector(".table-wrap"), rootMargin: "200px" }) : null;

  function drawSparkline(row) {
    if (row.drawn) return;
    row.drawn = true;
    var cell = row.tr.lastChild;
    if (row.t.skipped) { cell.textContent = row.t.skipped; cell.className = "text muted"; return; }
    cell.appendChild(histogramSvg(row.t.histogram, 96, 20, "#2f6fdf"));
  }

  function makeRow(row, eager) {
    var t = row.t, tr = el("tr", "row" + (t.nan + t.pos_inf + t.neg_inf > 0 ? " bad" : ""));
    columns.forEach(function (c) {
      var td = el("td", c.cls || "", c.show ? c.show(t) : c.get ? String(c.get(t)) : null);
      tr.appendChild(td);
    });
    tr.troveRow = row;
    tr.addEventListener("click", function () { toggleDetail(row); });
    row.tr = tr;
    // The first screenful of a page is drawn at once, so the page never opens on empty cells
    // (and a browser that delivers intersections late still shows them); the rest as they
    // scroll in.
    if (observer && !eager) observer.observe(tr);
    else drawSparkline(row);
  }

  function toggleDetail(row) {
    if (row.detail) { row.detail.remove(); row.detail = null; return; }
    var t = row.t, tr = el("tr", "detail"), td = el("td");
    td.colSpan = columns.length;
    var charts = el("div", "charts");
    function figure(h, caption) {
      var f = el("figure");
      f.appendChild(histogramSvg(h, 360, 90, "#2f6fdf"));
      var range = h ? " [" + fmt(h.range[0]) + ", " + fmt(h.range[1]) + "]" : " (no values)";
      f.appendChild(el("figcaption", null, caption + range));
      charts.appendChild(f);
    }
    figure(t.histogram, "values, " + (t.histogram ? t.histogram.counts.length : 0) + " bins");
    figure(t.log10_abs_histogram, "log10 |x| of nonzero values");
    td.appendChild(charts);
    var facts = ["count " + count(t.count), "finite " + count(t.finite), "mean |x| " + fmt(t.mean_abs),
                 "subnormal " + (t.subnormal === null || t.subnormal === undefined ? "\u2013" : count(t.subnormal)),
                 "+inf " + count(t.pos_inf), "-inf " + count(t.neg_inf)];
    if (t.tied) facts.push("shares its bytes with an earlier key");
    var c = changeByKey.get(t.key);
    if (c && !c.changed) facts.push("||a-b||/||a|| " + fmt(c.relative) + ", max |a-b| " + fmt(c.max_abs));
    td.appendChild(el("div", "muted", facts.join(" \u00b7 ")));
    tr.appendChild(td);
    row.detail = tr;
    row.tr.after(tr);
  }

  function matcher(pattern) {
    if (!pattern) return null;
    if (/[*?]/.test(pattern)) {  // a glob over the whole key, as `trove stats --keys` reads one
      var re = "";
      for (var i = 0; i < pattern.length; i++) {
        var ch = pattern.charAt(i);
        if (ch === "*" && pattern.charAt(i + 1) === "*") { re += ".*"; i++; }
        else if (ch === "*") re += "[^/]*";
        else if (ch === "?") re += "[^/]";
        else re += ch.replace(/[.+^${}()|[\]\\]/g, "\\$&");
      }
      var r = new RegExp("^" + re + "$");
      return function (k) { return r.test(k); };
    }
    var low = pattern.toLowerCase();
    return function (k) { return k.toLowerCase().indexOf(low) >= 0; };
  }

  function pages() { return Math.max(1, Math.ceil(visible.length / PAGE_ROWS)); }

  function render() {
    var body = document.getElementById("rows"), frag = document.createDocumentFragment();
    page = Math.max(0, Math.min(page, pages() - 1));
    var first = page * PAGE_ROWS, shown = visible.slice(first, first + PAGE_ROWS);
    shown.forEach(function (row, i) {
      if (!row.tr) makeRow(row, i < EAGER_SPARKLINES);
      frag.appendChild(row.tr);
      if (row.detail) frag.appendChild(row.detail);
    });
    body.textContent = "";
    body.appendChild(frag);
    document.getElementById("shown").textContent = (visible.length === rows.length
        ? count(rows.length) + " tensors" : count(visible.length) + " of " + count(rows.length) + " tensors") +
        (pages() > 1 ? ", rows " + count(first + 1) + "\u2013" + count(first + shown.length) : "");
    var pager = document.getElementById("pager");
    pager.hidden = pages() <= 1;
    document.getElementById("page").textContent = "page " + count(page + 1) + " of " + count(pages());
    document.getElementById("prev").disabled = page === 0;
    document.getElementById("next").disabled = page >= pages() - 1;
  }

  function update() {
    var m = matcher(document.getElementById("filter").value.trim());
    visible = m ? rows.filter(function (r) { return m(r.t.key); }) : rows.slice();
    page = 0;
    if (sortColumn >= 0) {
      var get = columns[sortColumn].get, sign = sortDescending ? -1 : 1;
      visible.sort(function (p, q) {
        var a = get(p.t), b = get(q.t);
        var an = a === null || a === undefined || (typeof a === "number" && isNaN(a));
        var bn = b === null || b === undefined || (typeof b === "number" && isNaN(b));
        if (an || bn) return an === bn ? p.index - q.index : an ? 1 : -1;  // no figure: last either way
        if (a < b) return -sign;
        if (a > b) return sign;
        return p.index - q.index;
      });
    }
    render();
  }

  part(function () {
    var head = document.getElementById("head");
    columns.forEach(function (c, i) {
      var th = el("th", c.cls || "", c.name);
      if (c.get) th.addEventListener("click", function () {
        sortDescending = sortColumn === i ? !sortDescending : c.cls !== "key" && c.cls !== "text";
        sortColumn = i;
        Array.prototype.forEach.call(head.children, function (h) { h.classList.remove("sorted-asc", "sorted-desc"); });
        th.classList.add(sortDescending ? "sorted-desc" : "sorted-asc");
        update();
      });
      head.appendChild(th);
    });
    document.getElementById("prev").addEventListener("click", function () { page--; render(); });
    document.getElementById("next").addEventListener("click", function () { page++; render(); });
    var pending = 0, filter = document.getElementById("filter");
    filter.addEventListener("input", function () {
      if (pending) return;
      pending = requestAnimationFrame(function () { pending = 0; update(); });
    });
    // A link may carry a view: report.html#filter=layers.1*&sort=std-desc (a column's name)&page=2.
    var view = new URLSearchParams(location.hash.slice(1));
    if (view.has("filter")) filter.value = view.get("filter");
    var sort = (view.get("sort") || "").match(/^(.*?)(-desc)?$/);
    var column = columns.findIndex(function (c) { return c.get && c.name === sort[1]; });
    if (column >= 0) {
      sortColumn = column;
      sortDescending = !!sort[2];
      head.children[column].classList.add(sortDescending ? "sorted-desc" : "sorted-asc");
    }
    update();
    if (view.has("page")) {
      page = (parseInt(view.get("page"), 10) || 1) - 1;
      render();
    }
  });

  // --- the value tree ---------------------------------------------------------------------------------
  // Values come in trove's JSON encoding (docs/json.md): plain JSON where it is unambiguous, a
  // one-member object tagged "$..." otherwise.
  function isTensor(v) {
    return v !== null && typeof v === "object" && !Array.isArray(v) && v.$tensor && typeof v.$tensor === "object" &&
           Array.isArray(v.$tensor.shape);
  }
  function leafText(v) {
    if (v === null) return "None";
    if (v === true) return "True";
    if (v === false) return "False";
    if (typeof v === "string") return JSON.stringify(v);
    if (typeof v === "object" && !Array.isArray(v)) {
      if ("$float" in v) return String(v.$float);
      if ("$int" in v) return String(v.$int);
      if ("$complex" in v) return "(" + leafText(v.$complex[0]) + "+" + leafText(v.$complex[1]) + "j)";
      if ("$bytes" in v) return "b<" + ("$length" in v ? v.$length : Math.floor(v.$bytes.length * 3 / 4)) + " bytes>";
      if ("$global" in v) return String(v.$global);
      if ("$elided" in v) return "\u2026";
    }
    return JSON.stringify(v);
  }
  // A container's kind and children ({label, v}), or null for a leaf.
  function containerOf(v) {
    if (v === null || typeof v !== "object") return null;
    var items = function (list, kind) {
      return { kind: kind, children: list.map(function (x, i) { return { label: String(i), v: x }; }) };
    };
    if (Array.isArray(v)) return items(v, "list");
    if (Array.isArray(v.$tuple)) return items(v.$tuple, "tuple");
    if (Array.isArray(v.$set)) return items(v.$set, "set");
    if (Array.isArray(v.$frozenset)) return items(v.$frozenset, "frozenset");
    if (Array.isArray(v.$dict)) {
      return { kind: v.$class || "dict", children: v.$dict.map(function (p) {
        return Array.isArray(p) ? { label: leafText(p[0]), v: p[1] } : { label: "\u2026", v: p };
      }) };
    }
    if (typeof v.$object === "string") {
      var parts = [];
      if ("$args" in v) parts.push({ label: "args", v: v.$args });
      if ("$state" in v) parts.push({ label: "state", v: v.$state });
      return { kind: v.$object, children: parts };
    }
    var keys = Object.keys(v);
    if (keys.length && keys[0].charAt(0) === "$") return null;  // a tagged scalar
    return { kind: "dict", children: keys.map(function (k) { return { label: k, v: v[k] }; }) };
  }

  part(function () {
    var box = document.getElementById("values");
    if (A.values === null || A.values === undefined) { box.appendChild(el("p", "muted", "No values.")); return; }
    var top = el("ul");
    box.appendChild(top);
    // Iterative (a stack, not recursion): the tree's depth is the file's to choose, and trove cuts it.
    var stack = [{ v: A.values, label: null, parent: top, depth: 0 }], nodes = 0, MAX_NODES = 30000;
    while (stack.length) {
      var f = stack.pop(), v = f.v, li = el("li");
      f.parent.appendChild(li);
      if (++nodes > MAX_NODES) { li.textContent = "\u2026"; break; }
      var label = f.label === null ? "" : f.label + ": ";
      if (isTensor(v)) {
        li.appendChild(el("span", "k", label));
        li.appendChild(el("span", "t", "tensor " + v.$tensor.dtype + shape(v.$tensor.shape)));
        continue;
      }
      var c = containerOf(v);
      if (c === null) {
        li.appendChild(el("span", "k", label));
        li.appendChild(el("span", null, leafText(v)));
        continue;
      }
      var n = c.children.length, children = [], tensors = 0;
      for (var i = 0; i < n; i++) {
        if (isTensor(c.children[i].v)) tensors++;
        else children.push(c.children[i]);
      }
      var details = el("details"), summary = el("summary");
      summary.appendChild(el("span", "k", label));
      summary.appendChild(el("span", "t", c.kind + " of " + n + (tensors ? " (" + tensors + " tensors: see the table)" : "")));
      details.appendChild(summary);
      details.open = f.depth < 3 && children.length <= 200;
      li.appendChild(details);
      if (!children.length) continue;
      var ul = el("ul");
      details.appendChild(ul);
      for (var j = children.length - 1; j >= 0; j--) stack.push({ v: children[j].v, label: children[j].label, parent: ul, depth: f.depth + 1 });
    }
  });

  // --- what changed between the two files ------------------------------------------------------
  part(function () {
    if (!X) return;
    var section = document.getElementById("change"), body = document.getElementById("change-body");
    section.hidden = false;
    // Ranked as `trove diff` ranks: the largest relative change first, then the tensors that were
    // all zeros in A (a zero-initialised bias or LoRA B: their relative change is infinite and
    // would push every real change down), by ||b||.
    var fromZero = function (t) { var r = num(t.relative); return r === Infinity; };
    var changed = X.tensors.filter(function (t) { return !t.changed && num(t.relative) !== 0; })
      .sort(function (p, q) {
        var zp = fromZero(p), zq = fromZero(q);
        if (zp !== zq) return zp ? 1 : -1;
        var a = zp ? num(p.l2) : num(p.relative), b = zq ? num(q.l2) : num(q.relative);
        a = isNaN(a) ? Infinity : a; b = isNaN(b) ? Infinity : b;
        return b - a || (p.key < q.key ? -1 : 1);
      });
    var identical = X.tensors.filter(function (t) { return !t.changed && num(t.relative) === 0; }).length;
    var reshaped = X.tensors.filter(function (t) { return t.changed; });
    body.appendChild(el("p", null, count(X.tensors.length) + " tensors in both: " + count(changed.length) + " changed, " +
        count(identical) + " unchanged, " + count(reshaped.length) + " of another dtype or shape. " +
        "Bars: relative change ||a\u2212b||\u2082 / ||a||\u2082 on a log scale from 1e-7 (a float32 rounding) to 1 " +
        "(a whole change), largest first; tensors that were all zeros come after them, by ||b||\u2082."));
    var bars = el("div", "bars");
    body.appendChild(bars);
    var limit = 50;
    function drawBars() {
      bars.textContent = "";
      var shown = changed.slice(0, limit);
      if (!shown.length) { bars.appendChild(el("p", "muted", "No tensor values changed.")); return; }
      var W = 1200, ROW = 18, LABEL = 480, H = shown.length * ROW + 4, SPAN = W - LABEL - 150;
      var d = document.createElement("div");
      d.innerHTML = "<svg></svg>";
      var s = d.firstChild;
      s.setAttribute("viewBox", "0 0 " + W + " " + H);
      s.setAttribute("height", H);
      s.setAttribute("class", "change-bars");
      shown.forEach(function (t, i) {
        var r = num(t.relative), finite = isFinite(r), y = i * ROW + 2;
        // log10(r) from -7 to 0 spans the bar; smaller changes keep 1 px, larger ones the whole.
        var len = finite ? Math.min(1, Math.max(0, (Math.log10(r) + 7) / 7)) * SPAN : 0;
        var key = keyText(t.key), text = key.length > 70 ? "\u2026" + key.slice(key.length - 69) : key;
        var label = svg("text", { x: LABEL - 6, y: y + 12, "text-anchor": "end" }, s);
        label.textContent = text;
        var bar = svg("rect", { x: LABEL, y: y + 2, width: Math.max(1, len).toFixed(1), height: ROW - 5, fill: finite ? "#2f6fdf" : "#8a8f98" }, s);
        svg("title", {}, bar).textContent = key + "\n" + (finite ? "||a-b||/||a|| = " + fmt(t.relative) : "all zeros in A, ||b|| = " + fmt(t.l2)) +
            ", max |a-b| = " + fmt(t.max_abs);
        svg("text", { x: (LABEL + Math.max(1, len) + 4).toFixed(1), y: y + 12 }, s).textContent =
            finite ? fmt(t.relative) : "was all zeros, ||b|| " + fmt(t.l2);
      });
      bars.appendChild(s);
      if (changed.length > limit) {
        var more = el("button", null, "show all " + count(changed.length));
        more.addEventListener("click", function () { limit = changed.length; drawBars(); });
        bars.appendChild(more);
      }
    }
    drawBars();
    var lists = el("div", "keylists");
    body.appendChild(lists);
    function keyList(title, keys, describe) {
      var d = el("div");
      d.appendChild(el("h3", null, title + " (" + count(keys.length) + ")"));
      var ul = el("ul", "keys"), LIST = 2000;
      keys.slice(0, LIST).forEach(function (k) { ul.appendChild(el("li", null, describe ? describe(k) : keyText(k))); });
      if (keys.length > LIST) ul.appendChild(el("li", "muted", "\u2026 and " + count(keys.length - LIST) + " more"));
      d.appendChild(ul);
      lists.appendChild(d);
    }
    keyList("only in A", X.only_in_a);
    keyList("only in B", X.only_in_b);
    if (reshaped.length) keyList("other dtype or shape", reshaped, function (t) { return keyText(t.key) + ": " + t.changed; });
    if (X.values_total) {
      keyList("values that differ", X.values, function (v) {
        return v.key + ": " + (v.a === "" ? "(absent)" : v.a) + " \u2192 " + (v.b === "" ? "(absent)" : v.b);
      });
    }
  });

  root.setAttribute("data-rendered", "1");
})();
