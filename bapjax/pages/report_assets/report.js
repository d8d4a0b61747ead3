// The bapjax predictions report: item table with filters, item view with a three.js scene.
// Data: the JSON in <script id="report-data"> written by bapjax/report.py (its docstring has
// the fields). The page opens in two steps: while it loads, the header, the item table and the
// first item's dialogue and actions (synchronously: "open"); after the first paint the WebGL
// renderer, whose context creation and shader compilation are slow without a GPU, and the 3D view
// ("frame"). `window.bapjaxReport.times` holds the page's clock (ms from navigation start) at each
// step; ?selftest builds the 3D view synchronously, as --dump-dom serializes at the load event.
(function () {
  "use strict";
  const TIMES = { script: performance.now() };
  window.bapjaxReport = { times: TIMES };
  const DATA = JSON.parse(document.getElementById("report-data").textContent);
  const ITEMS = DATA.items;
  const HISTORIES = DATA.histories;
  TIMES.data = performance.now();
  const COLOR_HEX = [null, 0xd62728, 0xff7f0e, 0xf2d12a, 0x2ca02c, 0x1f77b4, 0x9467bd];
  const COLOR_NAMES = [null, "red", "orange", "yellow", "green", "blue", "purple"];
  const STATUS_HEX = { matched: 0x1a9e3f, missed: 0x1f5fd6, extra: 0xd92020 };
  const METRICS = ["overall", "type", "color", "location", "shape"];
  const $ = (id) => document.getElementById(id);
  const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
  const pct = (f) => (100 * f).toFixed(1);

  // ---------------------------------------------------------------------------------------
  // Header

  const meta = DATA.meta;
  document.title = meta.title;
  $("title").textContent = meta.title;
  const partial = meta.partial ? ` (partial: the first ${meta.partial.first} of ${meta.partial.of})` : "";
  $("meta").textContent = `${meta.items_source} · ${meta.predictions_source} · ${ITEMS.length} items${partial} · ${meta.created}`;
  const micro = DATA.summary.micro;
  $("scores").innerHTML = "micro fairer F1 " + ["EB", "NEB", "Overall"].map((g) =>
    `${g} <b>${micro[g].overall === null ? "-" : pct(micro[g].overall)}</b>`).join(" · ") +
    ` (Type ${pct(micro.Overall.type)}, Color ${pct(micro.Overall.color)}, Location ${pct(micro.Overall.location)})`;

  // ---------------------------------------------------------------------------------------
  // Table: sorting, filtering

  const tbody = $("rows");

  // The item column is as wide as the widest id (the ids are monospaced: the longest), so no id
  // is cut off; the list keeps room for the figures beside it (report.css, --id-width).
  (function fitIdColumn() {
    let longest = "";
    for (const it of ITEMS) if (it.id.length > longest.length) longest = it.id;
    const probe = document.createElement("span");
    probe.id = "idprobe";
    probe.textContent = longest;
    document.body.appendChild(probe);
    document.documentElement.style.setProperty("--id-width", `${Math.ceil(probe.getBoundingClientRect().width) + 2}px`);
    probe.remove();
  })();
  let order = ITEMS.map((_, i) => i); // the visible rows, in display order
  let sortKey = null, sortDir = 1;
  let current = -1;
  let searchText = null; // per item, the lower-cased chat text (built on the first search)

  function chatText(i) {
    const [h, n] = ITEMS[i].h;
    const events = HISTORIES[h];
    const parts = [];
    for (let k = 0; k < n; k++) if (events[k].length === 2) parts.push(events[k][1]);
    return parts.join("\n").toLowerCase();
  }

  function sortValue(item, key) {
    if (key === "id") return item.id;
    if (key === "g") return item.g;
    if (key === "nr" || key === "np") return item[key];
    return item.f[key];
  }

  function filtered() {
    const group = $("f-group").value;
    const num = (id, scale) => { const v = $(id).value; return v === "" ? null : Number(v) / scale; };
    const f1min = num("f-f1min", 100), f1max = num("f-f1max", 100);
    const lenmin = num("f-lenmin", 1), lenmax = num("f-lenmax", 1);
    const query = $("f-text").value.trim().toLowerCase();
    if (query && searchText === null) searchText = ITEMS.map((_, i) => chatText(i));
    const out = [];
    for (let i = 0; i < ITEMS.length; i++) {
      const it = ITEMS[i];
      if (group && it.g !== group) continue;
      if (f1min !== null && !(it.f.overall >= f1min)) continue;
      if (f1max !== null && !(it.f.overall <= f1max)) continue;
      if (lenmin !== null && it.nr < lenmin) continue;
      if (lenmax !== null && it.nr > lenmax) continue;
      if (query && !searchText[i].includes(query)) continue;
      out.push(i);
    }
    if (sortKey !== null) {
      out.sort((a, b) => {
        const va = sortValue(ITEMS[a], sortKey), vb = sortValue(ITEMS[b], sortKey);
        return (va < vb ? -1 : va > vb ? 1 : a - b) * sortDir;
      });
    }
    return out;
  }

  function rowHtml(i) {
    const it = ITEMS[i];
    const cells = METRICS.map((m) => {
      const f = it.f[m];
      return `<td class="${f === 0 ? "f0" : f === 1 ? "f1" : ""}">${pct(f)}</td>`;
    }).join("");
    return `<tr data-i="${i}"${i === current ? ' class="sel"' : ""}><td title="${esc(it.id)}">${esc(it.id)}</td>` +
      `<td>${it.g}</td><td>${it.nr}</td><td>${it.np}</td>${cells}</tr>`;
  }

  // Only the rows in view (and a margin) are in the DOM, between two spacer rows: laying out
  // thousands of rows is what would make the page slow to open.
  const wrap = $("tablewrap");
  let rowHeight = 22;
  function renderRows() {
    const head = wrap.querySelector("thead").offsetHeight;
    const first = Math.max(0, Math.floor((wrap.scrollTop - head) / rowHeight) - 15);
    const last = Math.min(order.length, first + Math.ceil(wrap.clientHeight / rowHeight) + 30);
    const spacer = (rows) => rows ? `<tr class="pad"><td colspan="9" style="height:${rows * rowHeight}px"></td></tr>` : "";
    tbody.innerHTML = spacer(first) + order.slice(first, last).map(rowHtml).join("") + spacer(order.length - last);
    const row = tbody.querySelector("tr[data-i]");
    if (row && Math.abs(row.offsetHeight - rowHeight) > 0.5) { rowHeight = row.offsetHeight; renderRows(); }
  }
  let scrolling = false;
  wrap.addEventListener("scroll", () => {
    if (!scrolling) { scrolling = true; requestAnimationFrame(() => { scrolling = false; renderRows(); }); }
  });

  // Row k lies at head + k * rowHeight in the scrolled content; the sticky header covers the
  // top `head` pixels of the view.
  function showRow(i) {
    const k = order.indexOf(i);
    if (k < 0) return;
    const head = wrap.querySelector("thead").offsetHeight;
    const top = k * rowHeight;
    if (top < wrap.scrollTop) wrap.scrollTop = top;
    else if (head + top + rowHeight > wrap.scrollTop + wrap.clientHeight) wrap.scrollTop = head + top + rowHeight - wrap.clientHeight;
    renderRows();
  }

  function refresh() {
    order = filtered();
    renderRows();
    $("count").textContent = `${order.length} of ${ITEMS.length} items`;
    document.querySelectorAll("th").forEach((th) => {
      th.classList.toggle("sorted-asc", th.dataset.key === sortKey && sortDir === 1);
      th.classList.toggle("sorted-desc", th.dataset.key === sortKey && sortDir === -1);
    });
  }

  document.querySelectorAll("th").forEach((th) => th.addEventListener("click", () => {
    const key = th.dataset.key;
    if (sortKey === key) sortDir = -sortDir; else { sortKey = key; sortDir = key === "id" || key === "g" ? 1 : -1; }
    refresh();
  }));
  let typing = null;
  ["f-group", "f-f1min", "f-f1max", "f-lenmin", "f-lenmax"].forEach((id) => $(id).addEventListener("input", refresh));
  $("f-group").addEventListener("change", refresh);
  $("f-text").addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(refresh, 150); });
  $("f-reset").addEventListener("click", () => {
    ["f-group", "f-f1min", "f-f1max", "f-lenmin", "f-lenmax", "f-text"].forEach((id) => { $(id).value = ""; });
    refresh();
  });
  tbody.addEventListener("click", (e) => {
    const tr = e.target.closest("tr[data-i]");
    if (tr) select(Number(tr.dataset.i));
  });

  // ---------------------------------------------------------------------------------------
  // 3D scene (world x, y, z = three.js x, y, z; a block at cell (x, y, z) is the unit box
  // [x, x+1] x [y-1, y] x [z, z+1], ground at 0; Minecraft yaw 0 faces +z, yaw 90 faces -x)

  const canvas = $("scene");
  // Made by startView(), after the table and the dialogue are on screen (null until then).
  let renderer = null, scene = null, camera = null, controls = null;
  let BOX = null, EDGES = null, CROSS = null;
  // The build region's pieces (region3d.js: shading, materials, labels, ground, geometries, Builder).
  const R = window.bapjaxRegion3D($("labels"));
  const { BACKGROUND, TARGET, flat, material, line, label } = R;
  function placeLabels() { R.placeLabels(camera, canvas); }
  function dropItemLabels() { R.dropLabels((entry) => entry.item); }

  const lighter = (hex, a) => new THREE.Color(hex).lerp(new THREE.Color(0xffffff), a);
  const solid = (c) => material("solid" + c, () => flat(COLOR_HEX[c]));
  const pale = (c) => material("pale" + c, () => flat(lighter(COLOR_HEX[c], 0.5)));
  const ghost = (c, o) => material("ghost" + c + o, () => flat(COLOR_HEX[c], { transparent: true, opacity: o, depthWrite: false }));
  const halo = (s) => material("halo" + s, () => new THREE.MeshBasicMaterial({ color: STATUS_HEX[s], side: THREE.BackSide }));

  let itemGroup = null;

  function at(obj, x, y, z, size) {
    obj.position.set(x + 0.5, y - 0.5, z + 0.5);
    if (size) obj.scale.setScalar(size);
    itemGroup.add(obj);
    return obj;
  }

  function rotate(x, z, r) { for (let k = 0; k < r; k++) [x, z] = [-z, x]; return [x, z]; }

  // Reference and predicted net actions [type, color, x, y, z, matched] -> drawn objects.
  function drawItem(it, aligned) {
    dropItemLabels();
    if (itemGroup) scene.remove(itemGroup);
    itemGroup = new THREE.Group();
    scene.add(itemGroup);
    const [r, dx, dz] = it.al;
    const moved = aligned && (r || dx || dz);
    const pred = it.pred.map((a) => {
      if (!moved) return a;
      const [x, z] = rotate(a[2], a[4], r);
      return [a[0], a[1], x + dx, a[3], z + dz, a[5]];
    });
    const removed = new Set();
    for (const a of it.ref.concat(pred)) if (a[0] === 1) removed.add(`${a[2]},${a[3]},${a[4]}`);
    for (const [x, y, z, c] of it.prev) {
      if (removed.has(`${x},${y},${z}`)) { at(new THREE.Mesh(BOX, ghost(c, 0.22)), x, y, z, 0.999); continue; }
      at(new THREE.Mesh(BOX, pale(c)), x, y, z);
      at(new THREE.LineSegments(EDGES, line(0x8c959f)), x, y, z, 1.001);
    }
    const actions = [];
    for (const a of it.ref) actions.push([a, a[5] ? "matched" : "missed"]);
    // A matched prediction drawn where the evaluator compared it coincides with its reference
    // action (drawn above); otherwise (aligned box off) it is drawn where the model put it.
    const atReference = moved || !(r || dx || dz);
    for (const a of pred) if (!(a[5] && atReference)) actions.push([a, a[5] ? "matched" : "extra"]);
    for (const [[t, c, x, y, z], status] of actions) {
      if (t === 1) { // removal: a wire box with a cross in the status color
        at(new THREE.LineSegments(EDGES, line(STATUS_HEX[status])), x, y, z, 1.04);
        at(new THREE.LineSegments(CROSS, line(STATUS_HEX[status])), x, y, z, 0.9);
      } else if (status === "missed") { // reference only: see-through
        at(new THREE.Mesh(BOX, ghost(c, 0.38)), x, y, z, 0.98);
        at(new THREE.LineSegments(EDGES, line(STATUS_HEX.missed)), x, y, z, 1.0);
      } else { // matched: full size; extra (prediction only): smaller; both with an outline
        const size = status === "extra" ? 0.78 : 0.9;
        at(new THREE.Mesh(BOX, solid(c)), x, y, z, size);
        at(new THREE.Mesh(BOX, halo(status)), x, y, z, size + 0.16);
      }
    }
    // The Builder and its view direction.
    const { group: figure, eye } = R.builderFigure(...it.pose);
    itemGroup.add(figure);
    label("Builder", "#24292f", eye.clone().add(new THREE.Vector3(0, 0.7, 0)), { item: true });
  }

  // Camera: behind the Builder (its yaw), looking down on the region's center column, far enough
  // that the ground and everything up to the item's highest block (or the Builder's head) fit:
  // seen from elevation e, ground 11 deep and height H span about 11 sin(e) + H cos(e) of the
  // view's height, 2 d tan(fov / 2) at distance d.
  function viewFromBuilder(it, top) {
    let high = it.pose[1] + 0.6; // the Builder's head
    for (const b of it.prev) high = Math.max(high, b[1]);
    for (const a of it.ref.concat(it.pred)) high = Math.max(high, a[3]);
    high = Math.min(high, 14);
    const yr = it.pose[3] * Math.PI / 180;
    const back = new THREE.Vector3(Math.sin(yr), 0, -Math.cos(yr)); // minus the view direction
    const elev = top ? 80 * Math.PI / 180 : 34 * Math.PI / 180;
    const span = 11 * Math.sin(elev) + high * Math.cos(elev) + 2.5; // + room for the legend and labels
    const dist = Math.max(17, span / (2 * Math.tan(camera.fov * Math.PI / 360)));
    const target = TARGET.clone().setY(Math.max(TARGET.y, high / 2));
    camera.position.copy(target).addScaledVector(back, dist * Math.cos(elev)).add(new THREE.Vector3(0, dist * Math.sin(elev), 0));
    controls.target.copy(target);
    controls.update();
  }

  function resize() { R.fit(canvas, renderer, camera); }

  function draw() { if (renderer) { renderer.render(scene, camera); placeLabels(); } }

  // The renderer, the fixed scene (ground, grid, axis labels), the shared geometries, and every
  // shader program the items use, compiled once here (three.js would otherwise compile a program
  // in the middle of the first item that needs it); then the current item is drawn.
  function startView() {
    if (renderer) return;
    TIMES.view_start = performance.now();
    ({ renderer, scene, camera, controls } = R.makeView(canvas, 38, 0.1, draw));
    TIMES.renderer = performance.now();
    ({ BOX, EDGES, CROSS } = R.geometries());

    // One object per kind of material (opaque and see-through blocks, outlines, lines): their
    // programs are all the items need.
    const samples = new THREE.Group();
    samples.add(new THREE.Mesh(BOX, solid(1)), new THREE.Mesh(BOX, ghost(1, 0.38)),
      new THREE.Mesh(BOX, halo("matched")), new THREE.LineSegments(EDGES, line(0x8c959f)));
    scene.add(samples);
    renderer.compile(scene, camera);
    scene.remove(samples);
    TIMES.compiled = performance.now();
    new ResizeObserver(() => { resize(); draw(); }).observe(canvas);
    if (current >= 0) showScene(ITEMS[current], false);
    TIMES.frame = performance.now();
    $("scene-wait").remove();
    $("opened").textContent += ` · 3D view in ${Math.round(TIMES.frame)} ms`;
  }

  // ---------------------------------------------------------------------------------------
  // Item view

  function describe(a) {
    return `${a[0] === 1 ? "remove" : "place "} ${COLOR_NAMES[a[1]].padEnd(6)} (${a[2]}, ${a[3]}, ${a[4]})`;
  }

  function actionList(list, statusOf) {
    if (!list.length) return "<li><i>none</i></li>";
    return list.map((a) => {
      const s = statusOf(a);
      const dot = `<span class="cdot" style="background:#${COLOR_HEX[a[1]].toString(16).padStart(6, "0")}"></span>`;
      return `<li><span class="st st-${s}">${s}</span>${dot}${esc(describe(a))}</li>`;
    }).join("");
  }

  function showDialogue(it) {
    const [h, n] = it.h;
    const events = HISTORIES[h].slice(0, n);
    let last = -1;
    events.forEach((e, k) => { if (e.length === 2 && e[0] === "A") last = k; });
    const html = [];
    let placed = 0, removedCount = 0;
    const flush = () => {
      if (placed || removedCount) {
        const parts = [];
        if (placed) parts.push(`placed ${placed}`);
        if (removedCount) parts.push(`removed ${removedCount}`);
        html.push(`<div class="acts">Builder ${parts.join(", ")}</div>`);
      }
      placed = removedCount = 0;
    };
    events.forEach((e, k) => {
      if (e.length === 2) {
        flush();
        const who = e[0] === "A" ? "Architect" : "Builder";
        html.push(`<div class="turn ${e[0] === "A" ? "arch" : "build"}${k === last ? " last" : ""}"><b>${who}:</b> ${esc(e[1])}</div>`);
      } else if (e[0] === 1) removedCount++; else placed++;
    });
    flush();
    html.push(`<div class="acts">next: the Builder's ${it.lr} recorded action${it.lr === 1 ? "" : "s"} (reference)</div>`);
    const box = $("dialogue");
    box.innerHTML = html.join("");
    const mark = box.querySelector(".last");
    box.scrollTop = box.scrollHeight;
    if (mark && mark.offsetTop < box.scrollTop) box.scrollTop = mark.offsetTop - 8;
  }

  function select(i, keepCamera) {
    if (i < 0 || i >= ITEMS.length) return;
    const it = ITEMS[i];
    current = i;
    showRow(i);
    const link = "#item=" + encodeURIComponent(it.id);
    if (location.hash !== link) history.replaceState(null, "", link);
    const [r, dx, dz] = it.al;
    const chips = METRICS.map((m) => `<span class="chip">${m === "overall" ? "F1" : m} ${pct(it.f[m])}</span>`).join(" ");
    $("itemhead").innerHTML =
      `<span class="id">${esc(it.id)}</span> <a href="${link}">link</a> <span>${it.g}${it.m ? " · fairer alignment" : ""}</span>` +
      `<span>reference ${it.nr} net (${it.lr} recorded) · prediction ${it.np} net (${it.lp} predicted)</span> ${chips}` +
      (r || dx || dz ? `<span class="note">scored after ${[r ? `turning ${r * 90}° clockwise (seen from above)` : "",
        dx || dz ? `shifting by (${dx}, ${dz}) in (x, z)` : ""].filter(Boolean).join(" and ")}</span>` : "");
    $("aligned-box").style.display = r || dx || dz ? "" : "none";
    showDialogue(it);
    $("actions").innerHTML =
      `<h3>Reference (net)</h3><ul>${actionList(it.ref, (a) => (a[5] ? "matched" : "missed"))}</ul>` +
      `<h3>Prediction (net)</h3><ul>${actionList(it.pred, (a) => (a[5] ? "matched" : "extra"))}</ul>`;
    showScene(it, keepCamera);
  }

  function showScene(it, keepCamera) {
    if (!renderer) return; // startView() draws the current item when it has made the renderer
    drawItem(it, $("aligned").checked);
    if (!keepCamera) viewFromBuilder(it, false);
    resize();
    draw();
  }

  function step(delta) {
    if (!order.length) return;
    const k = order.indexOf(current);
    const next = k < 0 ? 0 : Math.min(order.length - 1, Math.max(0, k + delta));
    select(order[next]);
  }

  document.addEventListener("keydown", (e) => {
    if (e.target.closest && e.target.closest("input, select, textarea")) return;
    if (e.key === "ArrowDown" || e.key === "j" || e.key === "n") { step(1); e.preventDefault(); }
    else if (e.key === "ArrowUp" || e.key === "k" || e.key === "p") { step(-1); e.preventDefault(); }
  });
  $("aligned").addEventListener("change", () => { if (current >= 0) select(current, true); });
  $("view-reset").addEventListener("click", () => { if (current >= 0 && renderer) { viewFromBuilder(ITEMS[current], false); draw(); } });
  $("view-top").addEventListener("click", () => { if (current >= 0 && renderer) { viewFromBuilder(ITEMS[current], true); draw(); } });

  const byId = new Map(ITEMS.map((it, i) => [it.id, i]));
  function fromHash() {
    const m = /^#item=(.+)$/.exec(location.hash);
    return m && byId.has(decodeURIComponent(m[1])) ? byId.get(decodeURIComponent(m[1])) : null;
  }
  window.addEventListener("hashchange", () => { const i = fromHash(); if (i !== null && i !== current) select(i); });

  refresh();
  TIMES.table = performance.now();
  const start = fromHash();
  select(start !== null ? start : (order.length ? order[0] : -1));
  const readyMs = performance.now();
  TIMES.open = readyMs;
  $("opened").textContent = `opened in ${Math.round(readyMs)} ms`;

  // ---------------------------------------------------------------------------------------
  // Self-test (?selftest[&q=word]): drives the page as a person would and writes what it saw
  // as JSON into #selftest-result; tests/test_report.py reads it with headless Chromium.

  function canvasStats() {
    startView();
    draw();
    const gl = renderer.getContext();
    const w = gl.drawingBufferWidth, h = gl.drawingBufferHeight;
    const px = new Uint8Array(w * h * 4);
    gl.readPixels(0, 0, w, h, gl.RGBA, gl.UNSIGNED_BYTE, px);
    const bg = new THREE.Color(BACKGROUND);
    const [br, bgn, bb] = [bg.r, bg.g, bg.b].map((v) => Math.round(v * 255));
    let differ = 0, colorful = 0;
    const colors = new Set();
    for (let k = 0; k < px.length; k += 4) {
      if (Math.abs(px[k] - br) + Math.abs(px[k + 1] - bgn) + Math.abs(px[k + 2] - bb) > 24) differ++;
      if (Math.max(px[k], px[k + 1], px[k + 2]) - Math.min(px[k], px[k + 1], px[k + 2]) > 60) colorful++;
      colors.add((px[k] >> 4) << 8 | (px[k + 1] >> 4) << 4 | (px[k + 2] >> 4));
    }
    return { width: w, height: h, non_background: differ, colorful, colors: colors.size };
  }

  // The rows in the DOM (a window of the filtered rows) and the count the page states.
  function rowsShown() { return Array.from(tbody.querySelectorAll("tr[data-i]")).map((tr) => ITEMS[Number(tr.dataset.i)]); }
  function rowsCounted() { return Number(/^(\d+) of/.exec($("count").textContent)[1]); }

  function selfTest(query) {
    startView(); // synchronously: --dump-dom serializes the page at its load event
    const out = { ready_ms: readyMs, times: TIMES, items: ITEMS.length, three: THREE.REVISION,
      programs: renderer.info.programs.length };
    const rows = tbody.querySelectorAll("tr[data-i]");
    const row = rows[Math.min(1, rows.length - 1)];
    row.dispatchEvent(new MouseEvent("click", { bubbles: true }));
    out.selected = ITEMS[current].id;
    const selectedRow = tbody.querySelector("tr.sel");
    out.selected_row = !!selectedRow && Number(selectedRow.dataset.i) === current;
    out.hash = decodeURIComponent(location.hash);
    out.canvas = canvasStats();
    document.dispatchEvent(new KeyboardEvent("keydown", { key: "ArrowDown", bubbles: true }));
    out.after_next = ITEMS[current].id;
    out.expected_next = ITEMS[order[Math.min(2, order.length - 1)]].id;
    $("f-group").value = "EB"; $("f-group").dispatchEvent(new Event("change"));
    let shown = rowsShown();
    out.filter_eb = { rows: rowsCounted(), in_dom: shown.length, all_eb: shown.every((it) => it.g === "EB"), count: $("count").textContent };
    $("f-reset").click();
    $("f-f1min").value = "50"; $("f-f1min").dispatchEvent(new Event("input"));
    shown = rowsShown();
    out.filter_f1min50 = { rows: rowsCounted(), all_at_least: shown.every((it) => it.f.overall >= 0.5) };
    $("f-reset").click();
    $("f-lenmin").value = "3"; $("f-lenmax").value = "5"; $("f-lenmax").dispatchEvent(new Event("input"));
    shown = rowsShown();
    out.filter_len3to5 = { rows: rowsCounted(), all_within: shown.every((it) => it.nr >= 3 && it.nr <= 5) };
    $("f-reset").click();
    if (query) {
      $("f-text").value = query;
      refresh();
      out.filter_text = { query, rows: rowsCounted(), in_dom: rowsShown().length };
      $("f-reset").click();
    }
    document.querySelector('th[data-key="overall"]').click();
    shown = rowsShown();
    out.sorted_desc = shown.every((it, k) => k === 0 || shown[k - 1].f.overall >= it.f.overall);
    out.rows_after_reset = rowsCounted();
    out.rows_in_dom = rowsShown().length;
    // scrolled to the end: the last filtered row is in the DOM
    wrap.scrollTop = wrap.scrollHeight;
    renderRows();
    out.last_row_after_scroll = rowsShown().slice(-1)[0].id === ITEMS[order[order.length - 1]].id;
    // every id shown whole: no cell's text is wider than the cell
    out.ids_cut = Array.from(tbody.querySelectorAll("tr[data-i] td:first-child")).filter((td) => td.scrollWidth > td.clientWidth).length;
    $("selftest-result").textContent = JSON.stringify(out);
  }

  const params = new URLSearchParams(location.search);
  if (params.has("selftest")) {
    try { selfTest(params.get("q")); } catch (err) { $("selftest-result").textContent = JSON.stringify({ error: String(err && err.stack || err) }); }
  } else {
    // After the first paint of the table and the dialogue: a requestAnimationFrame callback runs
    // just before that paint, a task it posts just after it.
    requestAnimationFrame(() => setTimeout(() => {
      TIMES.painted = performance.now();
      try { startView(); } catch (err) { $("scene-wait").textContent = `no 3D view: ${err.message || err}`; throw err; }
    }, 0));
  }
})();
