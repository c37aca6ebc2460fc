// uopgrad's offline graph viewer. The data (nodes, groups, one dot layout per level) is the
// JSON in #uop-data, written by uopcli/views/html/page.py; nothing is fetched. A level is drawn
// as one SVG from its precomputed layout; everything else (search, details, focus, paths,
// the forward/backward toggle, SVG export) works on the data in the page.
(function () {
  "use strict";
  const D = JSON.parse(document.getElementById("uop-data").textContent);
  const N = D.n, G = D.groups;
  const NODE = 0, GROUP = 1, COPY = 2, REF_NODE = 3, REF_GROUP = 4;
  const LINE = 12, PAD = 10, MAX_LINE = 40, SVGNS = "http://www.w3.org/2000/svg";
  const nodeCount = N.op.length;
  const $ = (id) => document.getElementById(id);
  const svg = $("view");

  const state = { group: 0, mode: "both", selected: -1, focus: null, path: null, vb: null };
  const inputName = new Map(D.inputs.map(([i, name]) => [i, name]));
  const outputNames = new Map();
  for (const [name, i] of D.outputs) {
    if (!outputNames.has(i)) outputNames.set(i, []);
    outputNames.get(i).push(name);
  }
  let users = null, searchTexts = null, drawn = null;
  const timing = { firstDrawMs: null, lastDrawMs: null, draws: 0 };

  // ------------------------------------------------------------------ text
  function esc(s) {
    return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  }
  function cut(s, n) { n = n || MAX_LINE; return s.length <= n ? s : s.slice(0, n - 1) + "…"; }
  function typeText(i) { const s = N.sh[i]; return s < 0 ? "" : D.dtypes[N.dt[i]] + "[" + D.shapes[s] + "]"; }
  function meta(i) { const m = N.meta[i]; return m < 0 ? null : D.metas[m]; }
  function isBackward(i) { const m = meta(i); return !!(m && m[3]); }
  function isTangent(i) { const m = meta(i); return !!(m && m[2] && (m[2] === "∂" || m[2].startsWith("∂/"))); }  // forward mode's nodes
  function metaText(i) {
    const m = meta(i);
    if (!m) return "";
    const name = m[0] == null ? "" : cut(m[0], 40);
    return m[3] ? (name ? "∇ " + name : "∇") : name;
  }
  function headText(i) { return (D.ops[N.op[i]] + " " + N.arg[i]).trim(); }
  function nodeLines(i) {   // the same lines as layout.py's node_lines (the box sizes come from those)
    const lines = inputName.has(i) ? [inputName.get(i), "input " + typeText(i)] : [headText(i), typeText(i)];
    lines.push(metaText(i));
    if (outputNames.has(i)) lines.push("→ " + outputNames.get(i).join(", "));
    return lines.filter((l) => l).map((l) => cut(l));
  }
  function copyLine(i) { return cut(D.ops[N.op[i]] === "BUFFER" ? "BUFFER " + typeText(i) : headText(i)); }
  function shortName(i) {
    const name = inputName.has(i) ? " " + inputName.get(i) : outputNames.has(i) ? " → " + outputNames.get(i).join(",") : "";
    return "%" + i + " " + headText(i) + " " + typeText(i) + name;
  }
  function nodeLink(i) { return '<a data-node="' + i + '">' + esc(cut(shortName(i), 70)) + "</a>"; }
  function groupLink(g) { return '<a data-group="' + g + '">' + esc(G.label[g]) + "</a>"; }

  // ------------------------------------------------------------------ graph walks
  function userLists() {
    if (!users) {
      users = Array.from({ length: nodeCount }, () => []);
      for (let i = 0; i < nodeCount; i++) for (const s of N.src[i]) users[s].push(i);
    }
    return users;
  }
  function reach(starts, next, limit) {   // breadth-first, `limit` steps (Infinity: all)
    const seen = new Set(starts);
    let frontier = starts.slice();
    for (let d = 0; d < limit && frontier.length; d++) {
      const nextFrontier = [];
      for (const v of frontier) for (const w of next(v)) if (!seen.has(w)) { seen.add(w); nextFrontier.push(w); }
      frontier = nextFrontier;
    }
    return seen;
  }
  const sources = (i) => N.src[i];
  const usersOf = (i) => userLists()[i];
  function ancestors(g) { const chain = []; for (; g >= 0; g = G.p[g]) chain.push(g); return chain.reverse(); }
  function groupsHolding(nodes) {   // every group with one of `nodes` inside, all levels up
    const held = new Set();
    for (const i of nodes) for (let g = D.home[i]; g >= 0 && !held.has(g); g = G.p[g]) held.add(g);
    return held;
  }

  // ------------------------------------------------------------------ drawing
  function familyStyle() {
    let css = "text{font:10px Helvetica,Arial,sans-serif;fill:#222}text.h{font-weight:bold}"
      + ".it rect.box{stroke:#4d4d4d;stroke-width:1}.it.bw rect.box{stroke:#c0392b;stroke-width:2;stroke-dasharray:5 3}"
      + ".it.g rect.box{fill:#f6fbfa;stroke:#2a9d8f;stroke-width:1.5}.it.g.bw rect.box{fill:#fdf3f2;stroke:#c0392b}"
      + ".it.tg rect.box{stroke:#1f78b4;stroke-width:2.5;stroke-dasharray:1 3}"
      + ".it.in rect.box,.it.out rect.box{stroke:#000;stroke-width:2.5}"
      + ".it.c rect.box,.it.r rect.box{fill:#fff;stroke:#888;stroke-dasharray:2 2}.it.c text,.it.r text{fill:#555}"
      + ".it.sel rect.box{stroke:#f39c12;stroke-width:4;stroke-dasharray:none}"
      + ".it.hit rect.box{stroke:#8e44ad;stroke-width:3}"
      + "path.e{fill:none;stroke:#666;stroke-width:1}path.e.bw{stroke:#c0392b;stroke-opacity:.6}"
      + ".on rect.box{stroke:#e67e22!important;stroke-width:3.5!important}path.e.on{stroke:#e67e22;stroke-width:3}"
      + ".dim{opacity:.25}.hid{display:none}text.count{fill:#555;font-size:9px}";
    D.fam.forEach(([name, colour], k) => { css += ".f" + k + " rect.box{fill:" + colour + "}"; });
    return css;
  }
  const STYLE = familyStyle();

  function textLines(lines, w, bold) {
    let out = "";
    lines.forEach((line, k) => {
      out += '<text x="' + w / 2 + '" y="' + (PAD / 2 + LINE * (k + 1) - 2) + '" text-anchor="middle"'
        + (k === 0 && bold ? ' class="h"' : "") + ">" + esc(line) + "</text>";
    });
    return out;
  }
  function familyBar(g, w, y) {
    const counts = G.fam[g], total = counts.reduce((a, b) => a + b, 0) || 1;
    let x = 8, out = "";
    counts.forEach((c, k) => {
      if (!c) return;
      const width = (w - 16) * c / total;
      out += '<rect x="' + x.toFixed(1) + '" y="' + y + '" width="' + width.toFixed(1) + '" height="5" fill="' + D.fam[k][1] + '"/>';
      x += width;
    });
    return out;
  }
  function itemBackward(kind, ref) {
    if (kind === GROUP || kind === REF_GROUP) return !!G.bw[ref];
    return isBackward(ref);
  }
  function itemSvg(k, kind, ref, x, y, w, h) {
    let cls, body, title;
    if (kind === NODE) {
      cls = "it n f" + D.opFam[N.op[ref]] + (inputName.has(ref) ? " in" : "") + (outputNames.has(ref) ? " out" : "")
        + (isTangent(ref) ? " tg" : "");
      body = '<rect class="box" width="' + w + '" height="' + h + '" rx="' + (isBackward(ref) ? 0 : 5) + '"/>'
        + textLines(nodeLines(ref), w, true);
      title = shortName(ref);
    } else if (kind === GROUP) {
      cls = "it g";
      const lines = [cut(G.label[ref]), G.size[ref] + " nodes", G.mix[ref]];
      body = '<rect class="box" width="' + w + '" height="' + h + '" rx="7"/>' + textLines(lines, w, true)
        + familyBar(ref, w, h - 10);
      title = G.label[ref] + ": " + G.detail[ref] + " (click to open)";
    } else if (kind === COPY) {
      cls = "it c f" + D.opFam[N.op[ref]];
      body = '<rect class="box" width="' + w + '" height="' + h + '" rx="3"/>' + textLines([copyLine(ref)], w, false);
      title = shortName(ref);
    } else {
      cls = "it r";
      const label = kind === REF_GROUP ? G.label[ref] : nodeLines(ref)[0];
      body = '<rect class="box" width="' + w + '" height="' + h + '" rx="3"/>' + textLines([cut("↑ " + label)], w, false);
      title = (kind === REF_GROUP ? G.label[ref] : shortName(ref)) + ", drawn higher up (click to go there)";
    }
    if (itemBackward(kind, ref)) cls += " bw";
    return '<g class="' + cls + '" data-k="' + k + '" transform="translate(' + x + "," + y + ')"><title>'
      + esc(title) + "</title>" + body + "</g>";
  }
  function edgePath(points) {
    let d = "M" + points[0] + " " + points[1];
    const n = points.length / 2;
    if ((n - 1) % 3 === 0) {
      for (let j = 1; j < n; j += 3) {
        d += "C" + points.slice(2 * j, 2 * j + 6).join(" ");
      }
    } else {
      for (let j = 1; j < n; j++) d += "L" + points[2 * j] + " " + points[2 * j + 1];
    }
    return d;
  }

  function draw(g, started) {
    const t0 = started || performance.now();
    const [W, H, flat, edges] = D.levels[g];
    const items = [];
    for (let k = 0; k < flat.length; k += 6) items.push(flat.slice(k, k + 6));
    let out = "<style>" + STYLE + "</style><defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"1\" refY=\"5\""
      + ' markerWidth="7" markerHeight="7" orient="auto"><path d="M0 0L10 5L0 10z" fill="#666"/></marker></defs>';
    out += '<rect class="bg" x="0" y="0" width="' + W + '" height="' + H + '" fill="#fff"/>';
    edges.forEach((e, j) => {
      const [a, b, count] = e, points = e.slice(3);
      const bw = itemBackward(items[a][0], items[a][1]) || itemBackward(items[b][0], items[b][1]);
      out += '<path class="e' + (bw ? " bw" : "") + '" data-j="' + j + '" d="' + edgePath(points) + '" marker-end="url(#arrow)"/>';
      if (count > 1) {
        const m = Math.floor(points.length / 4) * 2;
        out += '<text class="count" data-j="' + j + '" x="' + (points[m] + 4) + '" y="' + points[m + 1] + '">×' + count + "</text>";
      }
    });
    items.forEach(([kind, ref, x, y, w, h], k) => { out += itemSvg(k, kind, ref, x, y, w, h); });
    svg.innerHTML = out;
    drawn = { g, items, edges, W, H };
    state.group = g;
    crumbs();
    applyView();
    fit(true);
    if (state.selected < 0) showGroup(g);
    requestAnimationFrame(() => requestAnimationFrame(() => {
      const now = performance.now();
      timing.lastDrawMs = now - t0;
      if (timing.firstDrawMs === null) timing.firstDrawMs = now;   // since navigation start
      timing.draws += 1;
      document.body.dataset.level = String(g);
      document.body.dataset.draws = String(timing.draws);
    }));
  }

  // which items show (mode, focus), which are lit (path, selection)
  function applyView() {
    if (!drawn) return;
    const { items, edges } = drawn;
    const focusNodes = state.focus ? state.focus.nodes : null;
    const focusGroups = state.focus ? state.focus.groups : null;
    const pathNodes = state.path ? state.path.nodes : null;
    const pathGroups = state.path ? state.path.groups : null;
    const target = new Map();  // copy/ref item -> the item it stands beside
    edges.forEach(([a, b]) => { const kind = items[a][0]; if (kind === COPY || kind === REF_NODE || kind === REF_GROUP) target.set(a, b); });
    const holds = (kind, ref, nodes, groups) => (kind === GROUP || kind === REF_GROUP) ? groups.has(ref) : nodes.has(ref);
    const shown = items.map(([kind, ref]) => {
      if (state.mode === "fwd" && itemBackward(kind, ref)) return false;
      if (state.mode === "bwd" && !itemBackward(kind, ref) && kind !== COPY) return false;
      if (focusNodes && !holds(kind, ref, focusNodes, focusGroups)) return false;
      return true;
    });
    target.forEach((b, a) => { if (!shown[b]) shown[a] = false; });
    const lit = items.map(([kind, ref]) => !!pathNodes && holds(kind, ref, pathNodes, pathGroups));
    svg.querySelectorAll("g.it").forEach((el) => {
      const k = +el.dataset.k, [kind, ref] = items[k];
      el.classList.toggle("hid", !shown[k]);
      el.classList.toggle("on", lit[k]);
      el.classList.toggle("dim", !!pathNodes && !lit[k]);
      el.classList.toggle("sel", kind !== GROUP && kind !== REF_GROUP && ref === state.selected);
    });
    svg.querySelectorAll("[data-j]").forEach((el) => {
      const [a, b] = edges[+el.dataset.j];
      el.classList.toggle("hid", !(shown[a] && shown[b]));
      el.classList.toggle("on", lit[a] && lit[b]);
      el.classList.toggle("dim", !!pathNodes && !(lit[a] && lit[b]));
    });
    $("empty").hidden = shown.some((s) => s);
  }

  // ------------------------------------------------------------------ view box: fit, pan, zoom
  function visibleBox() {
    let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    drawn.items.forEach(([kind, ref, x, y, w, h], k) => {
      const el = svg.querySelector('g.it[data-k="' + k + '"]');
      if (el && el.classList.contains("hid")) return;
      x0 = Math.min(x0, x); y0 = Math.min(y0, y); x1 = Math.max(x1, x + w); y1 = Math.max(y1, y + h);
    });
    if (x0 === Infinity) return { x: 0, y: 0, w: drawn.W, h: drawn.H };
    return { x: x0 - 10, y: y0 - 10, w: x1 - x0 + 20, h: y1 - y0 + 20 };
  }
  function setViewBox(vb) { state.vb = vb; svg.setAttribute("viewBox", [vb.x, vb.y, vb.w, vb.h].map((v) => v.toFixed(1)).join(" ")); }
  const MIN_SCALE = 1;   // labels are 10px at scale 1: neither fit goes below it (pan to see the rest)
  function fit(readable) {   // readable: the top of the level first where it does not fit
    const box = visibleBox(), cw = svg.clientWidth || 800, ch = svg.clientHeight || 600;
    const scale = Math.max(Math.min(cw / box.w, ch / box.h, 1.6), MIN_SCALE);
    const w = cw / scale, h = ch / scale;
    setViewBox({ x: box.x + (box.w - w) / 2, y: box.h * scale > ch ? box.y : box.y + (box.h - h) / 2, w, h });
  }
  function centreOn(k) {
    const [, , x, y, w, h] = drawn.items[k], cw = svg.clientWidth || 800, ch = svg.clientHeight || 600;
    const scale = Math.max(cw / state.vb.w, MIN_SCALE), vw = cw / scale, vh = ch / scale;
    setViewBox({ x: x + w / 2 - vw / 2, y: y + h / 2 - vh / 2, w: vw, h: vh });
  }
  let drag = null;
  $("canvas").addEventListener("mousedown", (ev) => {
    drag = { x: ev.clientX, y: ev.clientY, vb: Object.assign({}, state.vb), moved: false };
  });
  window.addEventListener("mousemove", (ev) => {
    if (!drag) return;
    const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) > 3) { drag.moved = true; $("canvas").classList.add("dragging"); }
    const k = drag.vb.w / (svg.clientWidth || 800);
    setViewBox({ x: drag.vb.x - dx * k, y: drag.vb.y - dy * k, w: drag.vb.w, h: drag.vb.h });
  });
  window.addEventListener("mouseup", () => { setTimeout(() => { drag = null; }, 0); $("canvas").classList.remove("dragging"); });
  $("canvas").addEventListener("wheel", (ev) => {
    ev.preventDefault();
    const rect = svg.getBoundingClientRect(), vb = state.vb, f = Math.exp(ev.deltaY * 0.0015);
    const px = vb.x + (ev.clientX - rect.left) / rect.width * vb.w, py = vb.y + (ev.clientY - rect.top) / rect.height * vb.h;
    setViewBox({ x: px - (px - vb.x) * f, y: py - (py - vb.y) * f, w: vb.w * f, h: vb.h * f });
  }, { passive: false });

  // ------------------------------------------------------------------ navigation
  function crumbs() {
    const chain = ancestors(state.group);
    $("crumbs").innerHTML = chain.map((g, k) => k === chain.length - 1
      ? '<span class="here">' + esc(G.label[g]) + "</span>" : '<a data-group="' + g + '">' + esc(G.label[g]) + "</a>")
      .join('<span class="sep">›</span>');
  }
  function open(g) { draw(g, performance.now()); }
  function itemOfNode(i) {   // the item drawing node i at the current level (itself, else a copy)
    let copy = -1;
    for (let k = 0; k < drawn.items.length; k++) {
      const [kind, ref] = drawn.items[k];
      if (kind === NODE && ref === i) return k;
      if (kind === COPY && ref === i && copy < 0) copy = k;
    }
    return copy;
  }
  function goTo(i) {   // draw node i's level, select it, centre it
    state.selected = i;
    if (!drawn || drawn.g !== D.home[i]) draw(D.home[i], performance.now());
    else applyView();
    const k = itemOfNode(i);
    if (k >= 0) centreOn(k);
    showNode(i);
  }

  // ------------------------------------------------------------------ details
  function valueRows(i) {
    const v = D.values[i];
    if (!v) return "";
    const [min, mean, max, nan] = v;
    return "<tr><td>value</td><td>min " + esc(min) + "<br>mean " + esc(mean) + "<br>max " + esc(max)
      + (nan ? "<br>" + esc(nan) + " nan" : "") + "</td></tr>";
  }
  function listOf(nodes) {
    if (!nodes.length) return '<div class="muted">none</div>';
    const shown = nodes.slice(0, 200).map((i) => "<li>" + nodeLink(i) + "</li>").join("");
    return "<ul>" + shown + "</ul>" + (nodes.length > 200 ? '<div class="muted">… ' + (nodes.length - 200) + " more</div>" : "");
  }
  let fed = null;
  function fedByInput(j) {   // node j is computed from a graph input (so differentiation can go through it)
    if (!fed) {
      fed = new Uint8Array(nodeCount);
      const stack = [];
      for (let r = 0; r < nodeCount; r++) {   // iterative: sources before users, whatever the order
        if (fed[r]) continue;
        stack.push(r);
        while (stack.length) {
          const v = stack[stack.length - 1];
          if (fed[v] === 1 || fed[v] === 2) { stack.pop(); continue; }
          const open = N.src[v].filter((s) => !fed[s]);
          if (open.length && fed[v] !== 3) { fed[v] = 3; for (const s of open) stack.push(s); continue; }
          fed[v] = inputName.has(v) || N.src[v].some((s) => fed[s] === 2) ? 2 : 1;
          stack.pop();
        }
      }
    }
    return fed[j] === 2;
  }
  // The forward node a backward node differentiates, told from the graph, never guessed.
  // Metadata names the function and scope (name, loc, scope), not which node: one call may
  // make many nodes, several calls may share the metadata (no source location). What the
  // graph tells: the rule that made backward node i for forward node F takes F's gradient (F's
  // shape) and gives one for a source of F (that source's shape); it reads F or F's sources.
  // 1. Candidates: the forward nodes of that metadata differentiation can go through
  //    (computed from a graph input: never a constant or an input).
  // 2. The call: i's piece (the backward nodes of its metadata joined to it) reads forward
  //    nodes; the candidates joined (by edges among themselves) to one it reads are the call.
  // 3. The node: the one candidate F with a source of i's shape whose own shape is that of a
  //    gradient i reads (i gives the gradient of that source); else, when the call is one
  //    node, that node if the piece reads it or the piece's incoming and outgoing gradients
  //    have its and a source's shapes. Anything else (several fit, none fits): no node, as the
  //    piece of a call of several nodes tells the call but not the node. Checked against the
  //    node each rule made, on the samples and bench/scoped_gpt.py: never a wrong node.
  function forwardOf(i) {
    const m = meta(i), mi = N.meta[i];
    let g = D.home[i];
    while (g >= 0 && !(G.bw[g] && G.twin[g] >= 0)) g = G.p[g];
    const twin = g >= 0 ? G.twin[g] : -1;
    const same = (j) => { const n = meta(j); return n && !n[3] && n[0] === m[0] && n[1] === m[1] && n[2] === m[2]; };
    let cands = [];
    for (let j = 0; j < nodeCount; j++) if (same(j) && N.src[j].length && fedByInput(j)) cands.push(j);
    const known = cands.length;
    let node = -1;
    if (cands.length) {
      const piece = reach([i], (v) => sources(v).concat(usersOf(v)).filter((w) => N.meta[w] === mi), Infinity);
      const read = new Set(), inShapes = new Set(), outShapes = new Set();
      for (const v of piece) {
        for (const s of N.src[v]) {
          if (piece.has(s)) continue;
          if (isBackward(s)) inShapes.add(N.sh[s]); else read.add(s);
        }
        if (outputNames.has(v) || usersOf(v).some((u) => !piece.has(u))) outShapes.add(N.sh[v]);
      }
      const isCand = new Set(cands);
      const touched = cands.filter((f) => read.has(f));
      if (touched.length) {   // 2. the calls the piece reads: candidates joined to those
        const call = reach(touched, (v) => sources(v).concat(usersOf(v)).filter((w) => isCand.has(w)), Infinity);
        cands = cands.filter((f) => call.has(f));
      }
      const gradShapes = new Set(N.src[i].filter(isBackward).map((s) => N.sh[s]));
      const fit = cands.filter((f) => gradShapes.has(N.sh[f]) && N.src[f].some((s) => N.sh[s] === N.sh[i]));
      if (fit.length === 1) node = fit[0];
      else if (cands.length === 1 && (touched.length || ((!inShapes.size || inShapes.has(N.sh[cands[0]]))
        && N.src[cands[0]].some((s) => outShapes.has(N.sh[s]))))) node = cands[0];
    }
    // no ∇ group of its own (a call that made one backward node): the forward node's group
    const home = node >= 0 && !G.bw[D.home[node]] ? D.home[node] : -1;
    return { twin: twin >= 0 ? twin : home, node, known };
  }
  function functionText(m) { return m[0] != null ? m[0] + (m[2] != null ? " in " + m[2] : "") : "scope " + m[2]; }
  function showNode(i) {
    const m = meta(i), rows = [];
    const row = (k, v) => rows.push("<tr><td>" + k + "</td><td>" + v + "</td></tr>");
    row("op", esc(D.ops[N.op[i]]));
    row("dtype", esc(D.dtypes[N.dt[i]]));
    row("shape", N.sh[i] < 0 ? "none (void)" : "[" + esc(D.shapes[N.sh[i]]) + "]");
    const full = D.full[i] !== undefined ? D.full[i] : N.arg[i];
    if (full) row("arg", esc(full));
    if (inputName.has(i)) row("input", esc(inputName.get(i)));
    if (outputNames.has(i)) row("output", esc(outputNames.get(i).join(", ")));
    if (m) {
      if (m[0] != null) row("name", esc(m[0]));
      if (m[2] != null) row("scope", esc(m[2]));
      if (m[1] != null) row("loc", esc(m[1]));
      row("direction", m[3] ? "backward (made by differentiation)" : "forward");
    }
    row("group", ancestors(D.home[i]).map(groupLink).join(" › "));
    let html = "<h3>%" + i + " " + esc(headText(i)) + "</h3><table>" + rows.join("") + valueRows(i) + "</table>";
    if (m && m[3] && m[0] == null && m[2] == null) {
      html += '<div><b>differentiates</b> <span class="muted">no named forward function (a gradient sum or seed)</span></div>';
    } else if (m && m[3]) {
      const { twin, node, known } = forwardOf(i);
      const what = esc(functionText(m));
      html += '<div class="fwd"><b>differentiates</b> ' + (twin >= 0 ? groupLink(twin) : '<span class="muted">' + what + "</span>")
        + "<br>forward node " + (node >= 0 ? nodeLink(node)
          : '<span class="muted">' + (known === 0 ? "not in this graph (no computed node of " + what + " here)"
            : "not told apart among the " + known + " nodes of " + what) + "</span>") + "</div>";
    }
    html += "<div><b>sources</b> (" + N.src[i].length + ")" + listOf(N.src[i]) + "</div>";
    const us = usersOf(i);
    html += "<div><b>users</b> (" + us.length + ")" + listOf(us) + "</div>";
    $("details").innerHTML = html;
  }
  function showGroup(g) {
    const rows = [];
    const row = (k, v) => rows.push("<tr><td>" + k + "</td><td>" + v + "</td></tr>");
    row("what", esc(G.detail[g]));
    row("nodes", String(G.size[g]));
    const kids = [];
    for (let k = 0; k < G.p.length; k++) if (G.p[k] === g) kids.push(k);
    if (kids.length) row("holds", kids.length + " group" + (kids.length === 1 ? "" : "s") + ": "
      + kids.slice(0, 12).map(groupLink).join(", ") + (kids.length > 12 ? ", …" : ""));
    row("ops", esc(G.mix[g]));
    if (G.twin[g] >= 0) row(G.bw[g] ? "differentiates" : "its gradient", groupLink(G.twin[g]));
    if (G.p[g] >= 0) row("inside", ancestors(G.p[g]).map(groupLink).join(" › "));
    $("details").innerHTML = "<h3>" + esc(G.label[g]) + "</h3><table>" + rows.join("") + "</table>"
      + '<div class="muted">click a box to open a group or to see a node</div>';
  }

  // ------------------------------------------------------------------ search
  function searchText(i) {
    if (!searchTexts) searchTexts = new Array(nodeCount);
    let t = searchTexts[i];
    if (t === undefined) {
      const m = meta(i) || [];
      t = searchTexts[i] = ["%" + i, D.ops[N.op[i]], N.arg[i], typeText(i), inputName.get(i) || "",
        (outputNames.get(i) || []).join(" "), m[0] || "", m[2] || "", m[1] || "", m[3] ? "backward ∇" : ""].join(" ").toLowerCase();
    }
    return t;
  }
  function search(query) {
    const words = query.toLowerCase().split(/\s+/).filter((w) => w);
    const hits = [];
    if (words.length) for (let i = 0; i < nodeCount; i++) {
      const t = searchText(i);
      if (words.every((w) => t.includes(w))) hits.push(i);
    }
    const box = $("results");
    box.hidden = !words.length;
    box.innerHTML = "<b>" + hits.length + " node" + (hits.length === 1 ? "" : "s") + "</b> match"
      + hits.slice(0, 200).map((i) => '<a class="hit" data-node="' + i + '">' + esc(cut(shortName(i), 60))
        + ' <span class="muted">' + esc(cut(ancestors(D.home[i]).slice(1).map((g) => G.label[g]).join("/"), 40)) + "</span></a>").join("")
      + (hits.length > 200 ? '<div class="muted">first 200 shown</div>' : "");
    return hits;
  }

  // ------------------------------------------------------------------ focus and paths
  function focus(i, k) {
    const nodes = new Set([...reach([i], sources, k), ...reach([i], usersOf, k)]);
    state.focus = { node: i, k, nodes, groups: groupsHolding(nodes) };
    goTo(i);
    fit(false);
    $("status").textContent = nodes.size + " nodes within " + k + " steps of %" + i;
  }
  function highlightPath(from, to) {
    const down = reach([from], usersOf, Infinity), up = reach([to], sources, Infinity);
    const nodes = new Set([...down].filter((v) => up.has(v)));
    state.path = nodes.size ? { nodes, groups: groupsHolding(nodes) } : null;
    applyView();
    $("status").textContent = nodes.size ? nodes.size + " nodes on paths from %" + from + " to %" + to
      : "no path from %" + from + " to %" + to;
    return nodes.size;
  }
  function clearMarks() { state.focus = null; state.path = null; applyView(); fit(true); $("status").textContent = ""; }

  // ------------------------------------------------------------------ export
  function svgText() {   // the current view: hidden items left out, the view box as shown
    const copy = svg.cloneNode(true);
    copy.querySelectorAll(".hid").forEach((el) => el.remove());
    copy.querySelectorAll("title").forEach((el) => el.remove());
    const box = visibleBox();
    copy.setAttribute("xmlns", SVGNS);
    copy.setAttribute("viewBox", [box.x, box.y, box.w, box.h].join(" "));
    copy.setAttribute("width", String(box.w));
    copy.setAttribute("height", String(box.h));
    copy.removeAttribute("id");
    const bg = copy.querySelector("rect.bg");
    if (bg) { bg.setAttribute("x", box.x); bg.setAttribute("y", box.y); bg.setAttribute("width", box.w); bg.setAttribute("height", box.h); }
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + new XMLSerializer().serializeToString(copy);
  }
  function exportSvg() {
    const blob = new Blob([svgText()], { type: "image/svg+xml" });
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = (G.label[state.group] || "graph").replace(/[^\w.∇-]+/g, "_") + ".svg";
    document.body.appendChild(a);
    a.click();
    setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
  }

  // ------------------------------------------------------------------ events
  svg.addEventListener("click", (ev) => {
    if (drag && drag.moved) return;
    const el = ev.target.closest("g.it");
    if (!el) return;
    const [kind, ref] = drawn.items[+el.dataset.k];
    if (kind === GROUP) { state.selected = -1; open(ref); }
    else if (kind === REF_GROUP) {   // the group it stands for is a box of this level
      const k = drawn.items.findIndex(([kd, r]) => kd === GROUP && r === ref);
      if (k >= 0) centreOn(k);
      showGroup(ref);
    }
    else if (kind === REF_NODE) goTo(ref);
    else { state.selected = ref; applyView(); showNode(ref); }
  });
  document.addEventListener("click", (ev) => {
    const a = ev.target.closest("a[data-node], a[data-group]");
    if (!a) return;
    ev.preventDefault();
    if (a.dataset.node !== undefined) goTo(+a.dataset.node);
    else { state.selected = -1; open(+a.dataset.group); }
  });
  document.querySelectorAll('input[name="mode"]').forEach((r) => r.addEventListener("change", () => {
    state.mode = r.value; applyView(); fit(true);
  }));
  let searchTimer = null;
  $("search").addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => search($("search").value), 150);
  });
  $("search").addEventListener("keydown", (ev) => {
    if (ev.key !== "Enter") return;
    clearTimeout(searchTimer);
    const hits = search($("search").value);
    if (hits.length) goTo(hits[0]);
  });
  $("fit").addEventListener("click", () => fit(false));
  $("export").addEventListener("click", exportSvg);
  $("focus").addEventListener("click", () => {
    if (state.selected >= 0) focus(state.selected, Math.max(0, parseInt($("focus-k").value, 10) || 0));
    else $("status").textContent = "select a node first";
  });
  $("path").addEventListener("click", () => highlightPath(+$("path-from").value, +$("path-to").value));
  $("clear").addEventListener("click", clearMarks);
  document.addEventListener("keydown", (ev) => {
    if (ev.target.tagName === "INPUT" || ev.target.tagName === "SELECT") return;
    if (ev.key === "/") { ev.preventDefault(); $("search").focus(); }
    if (ev.key === "Escape" && G.p[state.group] >= 0) { state.selected = -1; open(G.p[state.group]); }
  });

  // ------------------------------------------------------------------ start
  $("title").textContent = D.title + " · " + nodeCount + " nodes";
  $("path-from").innerHTML = D.inputs.map(([i, name]) => '<option value="' + i + '">' + esc(name) + "</option>").join("");
  $("path-to").innerHTML = D.outputs.map(([name, i]) => '<option value="' + i + '">' + esc(name) + "</option>").join("");
  $("legend-body").innerHTML = D.fam.map(([name, colour, text]) => '<div><span class="swatch" style="background:' + colour + '"></span>'
    + esc(text) + "</div>").join("")
    + '<div><span class="swatch" style="border:2px dashed #c0392b"></span>backward (∇): made by differentiation</div>'
    + '<div><span class="swatch" style="border:2.5px dotted #1f78b4"></span>tangent (∂ scope): made by forward mode (jvp, hvp)</div>'
    + '<div><span class="swatch" style="border:1.5px solid #2a9d8f;background:#f6fbfa"></span>a group: click to open; the bar is its op families</div>'
    + '<div><span class="swatch" style="border:1px dotted #888"></span>a constant beside its user, or ↑ a source drawn higher up</div>';
  window.uopViewer = { state, timing, open, goTo, search, focus, highlightPath, svgText, forwardOf, centre: centreOn, draw: () => drawn };
  draw(0);
})();
