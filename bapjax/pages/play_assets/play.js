// bapjax play: the Architect's page. Talks to the server of bapjax/play.py (docs/play.md has the
// API: blocks {x, y, z, color} and actions {type, color, x, y, z}, colors by name); draws the build region with the report's three.js pieces (report_assets/region3d.js), the
// Builder and its view direction, the Builder's predicted actions one by one; edits by clicking
// the scene (a voxel walk along the click's ray).
// World x, y, z = three.js x, y, z; a block at cell (x, y, z) is the unit box [x, x+1] x [y-1, y]
// x [z, z+1], ground at 0; Minecraft yaw 0 faces +z, yaw 90 faces -x; pitch > 0 looks down.
// `window.bapjaxPlay` exposes the page's state and a few hooks for tests/test_play.py.
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
  const COLOR_HEX = [null, 0xd62728, 0xff7f0e, 0xf2d12a, 0x2ca02c, 0x1f77b4, 0x9467bd];
  const COLOR_NAMES = [null, "red", "orange", "yellow", "green", "blue", "purple"];
  const hexOf = (name) => COLOR_HEX[COLOR_NAMES.indexOf(name)];
  const PENDING_HEX = 0xd97706;
  const TIMES = { script: performance.now() };
  const PLAY = {
    times: TIMES, info: null, game: null, pose: null, pending: null, shown: 0, busy: false, errors: [],
    mode: "place", color: 1, view: "overview", ready: false,
  };
  window.bapjaxPlay = PLAY;

  // ---------------------------------------------------------------------------------------
  // Server

  async function api(method, path, body) {
    const options = { method, headers: {} };
    if (body !== undefined) {
      options.body = JSON.stringify(body);
      options.headers["Content-Type"] = "application/json";
    }
    const response = await fetch(path, options);
    let answer = null;
    try { answer = await response.json(); } catch (err) { answer = { error: `${response.status} ${response.statusText}` }; }
    if (!response.ok) {
      const error = new Error(answer && answer.error ? answer.error : `HTTP ${response.status}`);
      error.status = response.status;
      throw error;
    }
    return answer;
  }

  function poseBody() {
    const p = PLAY.pose;
    return { x: p.x, y: p.y, z: p.z, yaw: p.yaw, pitch: p.pitch };
  }

  function status(text, kind) {
    const el = $("status");
    el.textContent = text;
    el.className = kind || "";
    if (kind === "error") PLAY.errors.push(text);
  }

  // One request at a time from this page; the answer replaces the game shown.
  async function act(verb, body, busyText) {
    if (PLAY.busy) return null;
    PLAY.busy = true;
    updateControls();
    if (busyText) status(busyText, "busy");
    try {
      const answer = await api("POST", `/api/games/${encodeURIComponent(PLAY.game.game_id)}/${verb}`,
        Object.assign({ version: PLAY.game.version }, body));
      return answer;
    } catch (err) {
      status(err.message, "error");
      if (err.status === 409 || err.status === 404) await reload();
      return null;
    } finally {
      PLAY.busy = false;
      updateControls();
    }
  }

  async function reload() {
    try { setGame(await api("GET", `/api/games/${encodeURIComponent(PLAY.game.game_id)}`), false); } catch (err) { /* shown already */ }
  }

  // ---------------------------------------------------------------------------------------
  // 3D scene

  const canvas = $("scene");
  let renderer = null, scene = null, camera = null, controls = null, BOX = null, EDGES = null, CROSS = null;
  let worldGroup = null, builderGroup = null;
  // The build region's pieces (region3d.js, shared with the report: shading, materials, labels,
  // ground, geometries, the Builder's figure).
  const R = window.bapjaxRegion3D($("labels"));
  const { BACKGROUND, TARGET, flat, material, line, label } = R;
  const solid = (color) => material("solid" + color, () => flat(hexOf(color)));
  const halo = () => material("halo", () => new THREE.MeshBasicMaterial({ color: PENDING_HEX, side: THREE.BackSide }));
  function placeLabels() { R.placeLabels(camera, canvas); }
  let builderLabel = null;

  function at(group, obj, x, y, z, size) {
    obj.position.set(x + 0.5, y - 0.5, z + 0.5);
    if (size) obj.scale.setScalar(size);
    group.add(obj);
    return obj;
  }

  function startView() {
    TIMES.view_start = performance.now();
    ({ renderer, scene, camera, controls } = R.makeView(canvas, 45, 0.05, draw));
    ({ BOX, EDGES, CROSS } = R.geometries());
    worldGroup = new THREE.Group();
    builderGroup = new THREE.Group();
    scene.add(worldGroup, builderGroup);
    builderLabel = label("Builder", "#24292f", new THREE.Vector3());
    new ResizeObserver(() => { resize(); draw(); }).observe(canvas);
    TIMES.renderer = performance.now();
    $("scene-wait").remove();
  }

  function resize() { R.fit(canvas, renderer, camera); }

  function draw() {
    if (!renderer) return;
    if (PLAY.view === "builder") eyeCamera();
    renderer.render(scene, camera);
    placeLabels();
    TIMES.frame = TIMES.frame || performance.now();
    PLAY.frames = (PLAY.frames || 0) + 1;
  }

  // The structure (solid blocks, grey edges) and the pending actions shown so far (amber halo;
  // a removal: amber wire box with a cross over the block).
  function drawWorld() {
    if (!renderer) return;
    scene.remove(worldGroup);
    worldGroup = new THREE.Group();
    scene.add(worldGroup);
    for (const { x, y, z, color } of PLAY.game.structure) {
      at(worldGroup, new THREE.Mesh(BOX, solid(color)), x, y, z);
      at(worldGroup, new THREE.LineSegments(EDGES, line(0x57606a)), x, y, z, 1.001);
    }
    const shown = PLAY.pending ? PLAY.pending.actions.slice(0, PLAY.shown) : [];
    for (const { type, color, x, y, z } of shown) {
      if (type === "remove") {
        at(worldGroup, new THREE.LineSegments(EDGES, line(PENDING_HEX)), x, y, z, 1.06);
        at(worldGroup, new THREE.LineSegments(CROSS, line(PENDING_HEX)), x, y, z, 0.9);
      } else {
        at(worldGroup, new THREE.Mesh(BOX, solid(color)), x, y, z, 0.86);
        at(worldGroup, new THREE.Mesh(BOX, halo()), x, y, z, 1.02);
      }
    }
    drawBuilder();
    draw();
  }

  function viewDirection(p) { return R.viewDirection(p.yaw, p.pitch); }
  function eyeOf(p) { return new THREE.Vector3(p.x, p.y - 1 + R.EYE, p.z); }

  function drawBuilder() {
    scene.remove(builderGroup);
    builderGroup = new THREE.Group();
    scene.add(builderGroup);
    const p = PLAY.pose;
    const eye = eyeOf(p);
    builderLabel.position.copy(eye).add(new THREE.Vector3(0, 0.7, 0));
    builderLabel.el.dataset.hidden = PLAY.view === "builder" ? "1" : "0";
    if (PLAY.view === "builder") return; // the camera is its eyes
    builderGroup.add(R.builderFigure(p.x, p.y, p.z, p.yaw, p.pitch).group);
  }

  // Overview: behind the Builder (its yaw), looking down on the region (as the report's view).
  function overviewCamera() {
    const yr = PLAY.pose.yaw * Math.PI / 180;
    const back = new THREE.Vector3(Math.sin(yr), 0, -Math.cos(yr));
    const elev = 38 * Math.PI / 180, dist = 22;
    camera.position.copy(TARGET).addScaledVector(back, dist * Math.cos(elev)).add(new THREE.Vector3(0, dist * Math.sin(elev), 0));
    controls.target.copy(TARGET);
    controls.update();
  }
  function eyeCamera() {
    const eye = eyeOf(PLAY.pose);
    camera.position.copy(eye);
    camera.lookAt(eye.clone().add(viewDirection(PLAY.pose)));
  }
  function setView(view) {
    PLAY.view = view;
    controls.enabled = view !== "builder";
    camera.fov = view === "builder" ? 70 : 45; // Minecraft's default field of view in the Builder's eyes
    camera.updateProjectionMatrix();
    if (view === "overview") overviewCamera();
    $("view-builder").classList.toggle("on", view === "builder");
    drawBuilder();
    draw();
  }

  // ---------------------------------------------------------------------------------------
  // Clicking the scene: the cell under the pointer, by walking the voxels along the ray
  // (Amanatides & Woo). The ground is a layer of cells below y = 1 inside the region.

  const REGION = { x: [-5, 5], y: [1, 9], z: [-5, 5] };
  const occupied = () => new Set(PLAY.game.structure.map(({ x, y, z }) => `${x},${y},${z}`));

  // What a click at client (cx, cy) hits: {cell: [x, y, z], normal: [dx, dy, dz], ground} or null.
  function pick(cx, cy) {
    if (!renderer) return null;
    const rect = canvas.getBoundingClientRect();
    const ndc = new THREE.Vector3(((cx - rect.left) / rect.width) * 2 - 1, -((cy - rect.top) / rect.height) * 2 + 1, 0.5);
    const origin = camera.position.clone();
    const dir = ndc.unproject(camera).sub(origin).normalize();
    // cell (x, y, z) is [x, x+1] x [y-1, y] x [z, z+1]: in "voxel space" v = (X, Y + 1, Z) it is
    // the unit cube at (x, y, z); the ground layer is y = 0.
    const o = [origin.x, origin.y + 1, origin.z], d = [dir.x, dir.y, dir.z];
    const lo = [REGION.x[0], 0, REGION.z[0]], hi = [REGION.x[1] + 1, REGION.y[1] + 1, REGION.z[1] + 1];
    let t0 = 0, t1 = Infinity, entryAxis = -1;
    for (let a = 0; a < 3; a++) {
      if (Math.abs(d[a]) < 1e-12) { if (o[a] < lo[a] || o[a] > hi[a]) return null; continue; }
      let ta = (lo[a] - o[a]) / d[a], tb = (hi[a] - o[a]) / d[a];
      if (ta > tb) [ta, tb] = [tb, ta];
      if (ta > t0) { t0 = ta; entryAxis = a; }
      t1 = Math.min(t1, tb);
    }
    if (t0 > t1) return null;
    const p = o.map((v, a) => v + d[a] * (t0 + 1e-6));
    const cell = p.map((v, a) => Math.min(hi[a] - 1, Math.max(lo[a], Math.floor(v))));
    const step = d.map((v) => (v > 0 ? 1 : -1));
    const tDelta = d.map((v) => (Math.abs(v) < 1e-12 ? Infinity : Math.abs(1 / v)));
    const tMax = d.map((v, a) => (Math.abs(v) < 1e-12 ? Infinity : ((v > 0 ? cell[a] + 1 : cell[a]) - o[a]) / v));
    const normal = [0, 0, 0];
    if (entryAxis >= 0) normal[entryAxis] = -step[entryAxis];
    const filled = occupied();
    for (let n = 0; n < 64; n++) {
      if (cell[1] === 0) return { cell: [cell[0], 0, cell[2]], normal: [0, 1, 0], ground: true };
      if (filled.has(`${cell[0]},${cell[1]},${cell[2]}`)) return { cell: cell.slice(), normal: normal.slice(), ground: false };
      const a = tMax[0] < tMax[1] ? (tMax[0] < tMax[2] ? 0 : 2) : (tMax[1] < tMax[2] ? 1 : 2);
      cell[a] += step[a];
      if (cell[a] < lo[a] || cell[a] >= hi[a]) return null;
      tMax[a] += tDelta[a];
      normal[0] = normal[1] = normal[2] = 0;
      normal[a] = -step[a];
    }
    return null;
  }

  // The edit a click at (cx, cy) makes in the current mode, or null.
  function editAt(cx, cy) {
    const hit = pick(cx, cy);
    if (!hit) return null;
    if (PLAY.mode === "remove") return hit.ground ? null : { type: "remove", x: hit.cell[0], y: hit.cell[1], z: hit.cell[2] };
    const [x, y, z] = hit.cell.map((v, a) => v + hit.normal[a]);
    return { type: "place", x, y, z, color: COLOR_NAMES[PLAY.color] };
  }

  // Client coordinates of the middle of a cell's top face (y = 0: the ground cell).
  function screenOf(x, y, z) {
    const v = new THREE.Vector3(x + 0.5, y, z + 0.5).project(camera);
    const rect = canvas.getBoundingClientRect();
    return [rect.left + ((v.x + 1) / 2) * rect.width, rect.top + ((1 - v.y) / 2) * rect.height];
  }

  let down = null;
  canvas.addEventListener("pointerdown", (e) => { down = [e.clientX, e.clientY, e.button]; });
  canvas.addEventListener("pointerup", async (e) => {
    if (!down || down[2] !== 0 || Math.hypot(e.clientX - down[0], e.clientY - down[1]) > 4) { down = null; return; }
    down = null;
    if (PLAY.pending) { status("accept or undo the Builder's actions before editing by hand", "error"); return; }
    const edit = editAt(e.clientX, e.clientY);
    if (!edit) return;
    const answer = await act("edit", Object.assign({ pose: poseBody() }, edit), "editing…");
    if (answer) {
      setGame(answer, false);
      const [type, color] = edit.type === "place" ? ["placed", edit.color] : ["removed", "the block"];
      status(`you ${type} ${color} at (${edit.x}, ${edit.y}, ${edit.z}) by hand`, "ok");
    }
  });

  // ---------------------------------------------------------------------------------------
  // Dialogue, predicted actions, controls

  function describe(a) {
    return `${a.type} ${a.color} (${a.x}, ${a.y}, ${a.z})`;
  }
  const dot = (color) => `<span class="cdot" style="background:#${hexOf(color).toString(16).padStart(6, "0")}"></span>`;

  function showDialogue() {
    const html = [];
    let group = null;
    const flush = () => {
      if (group) {
        const who = group.kind === "model" ? "Builder" : "you, by hand";
        html.push(`<div class="acts ${group.kind}"><b>${who}:</b> ${group.actions.map((a) => dot(a.color) + esc(describe(a))).join(", ")}</div>`);
      }
      group = null;
    };
    for (const e of PLAY.game.events) {
      if (e.by === "architect") { flush(); html.push(`<div class="turn arch"><b>Architect:</b> ${esc(e.text)}</div>`); continue; }
      if (!group || group.kind !== e.by) { flush(); group = { kind: e.by, actions: [] }; }
      group.actions.push(e.action);
    }
    flush();
    if (!PLAY.game.events.length) html.push('<div class="hint">Type an instruction for the Builder below, e.g. ' +
      '"put a red block in the middle". The Builder answers by building: it cannot talk.</div>');
    const box = $("dialogue");
    box.innerHTML = html.join("");
    box.scrollTop = box.scrollHeight;
  }

  function showPredicted() {
    const el = $("predicted");
    const p = PLAY.pending;
    if (!p) { el.innerHTML = ""; return; }
    const items = p.actions.slice(0, PLAY.shown).map((a, k) => `<li data-k="${k}">${dot(a.color)}${esc(describe(a))}</li>`);
    const done = PLAY.shown >= p.actions.length;
    el.innerHTML = `<h3>The Builder's predicted actions (${p.actions.length}, decoded in ${p.decode_ms} ms)</h3>` +
      (p.actions.length ? `<ol id="predicted-list">${items.join("")}</ol>` : "<p><i>none: the Builder stopped at once</i></p>") +
      (done ? "<p class=\"note\">accept them, or undo the turn</p>" : "");
  }

  let revealTimer = null;
  function reveal() {
    clearTimeout(revealTimer);
    const p = PLAY.pending;
    if (!p || PLAY.shown >= p.actions.length) { showPredicted(); updateControls(); return; }
    PLAY.shown += 1;
    showPredicted();
    drawWorld();
    updateControls();
    if (PLAY.shown < p.actions.length) revealTimer = setTimeout(reveal, Math.min(350, 2500 / p.actions.length));
    else builtSummary();
  }

  function builtSummary() {
    const acts = PLAY.pending.actions;
    if (!acts.length) { status("the Builder did nothing (it predicted STOP first)", "ok"); return; }
    const placed = acts.filter((a) => a.type === "place").length, removed = acts.length - placed;
    const parts = [];
    if (placed) parts.push(`place ${placed} block${placed === 1 ? "" : "s"}`);
    if (removed) parts.push(`remove ${removed}`);
    const listed = acts.slice(0, 6).map(describe).join(", ") + (acts.length > 6 ? `, … (${acts.length - 6} more)` : "");
    status(`the Builder would ${parts.join(" and ")}: ${listed}`, "ok");
  }

  function updateControls() {
    const pending = !!PLAY.pending, busy = PLAY.busy;
    const revealing = pending && PLAY.shown < PLAY.pending.actions.length;
    $("send").disabled = busy || pending;
    $("text").disabled = busy || pending;
    $("accept").disabled = busy || !pending || revealing;
    $("undo").disabled = busy || !PLAY.game || !PLAY.game.can_undo || revealing;
    document.body.classList.toggle("pending", pending);
  }

  function showPose() {
    const p = PLAY.pose;
    $("pose").textContent = `Builder at (${p.x.toFixed(1)}, ${p.y.toFixed(1)}, ${p.z.toFixed(1)}), yaw ${p.yaw.toFixed(0)}°, pitch ${p.pitch.toFixed(0)}°`;
  }

  // The game as the server answered; `animate`: reveal its pending actions one by one.
  function setGame(game, animate) {
    PLAY.game = game;
    if (!PLAY.pose) PLAY.pose = Object.assign({}, game.pose);
    PLAY.pending = game.pending;
    PLAY.shown = game.pending && !animate ? game.pending.actions.length : 0;
    if (location.hash !== `#game=${game.game_id}`) history.replaceState(null, "", `#game=${game.game_id}`);
    $("gameinfo").textContent = `game ${game.game_id} (version ${game.version}, ${game.items} item${game.items === 1 ? "" : "s"} so far) ` +
      (game.saved ? `in ${game.folder}` : `written to ${game.folder} once played`);
    showDialogue();
    showPredicted();
    showPose();
    drawWorld();
    updateControls();
    if (animate) reveal();
  }

  $("chat").addEventListener("submit", async (e) => {
    e.preventDefault();
    const text = $("text").value;
    if (!text.trim()) { status("type an instruction first", "error"); return; }
    const start = performance.now();
    const answer = await act("instruction", { text, pose: poseBody() }, "the Builder is thinking…");
    if (!answer) return;
    PLAY.last_round_trip_ms = performance.now() - start;
    $("text").value = "";
    setGame(answer, true);
  });
  $("text").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("chat").requestSubmit(); }
  });
  $("accept").addEventListener("click", async () => {
    const answer = await act("accept", { pose: poseBody() }, "accepting…");
    if (answer) { setGame(answer, false); status("accepted: the Builder's actions are in the game", "ok"); }
  });
  $("undo").addEventListener("click", async () => {
    const answer = await act("undo", {}, "undoing…");
    if (answer) { setGame(answer, false); status("the last turn is taken back", "ok"); }
  });

  // Edit mode and color
  $("palette").innerHTML = COLOR_NAMES.slice(1).map((name, k) =>
    `<button type="button" class="swatch${k === 0 ? " on" : ""}" data-color="${k + 1}" title="${name}" ` +
    `style="background:#${COLOR_HEX[k + 1].toString(16).padStart(6, "0")}"></button>`).join("");
  $("palette").addEventListener("click", (e) => {
    const b = e.target.closest("[data-color]");
    if (!b) return;
    PLAY.color = Number(b.dataset.color);
    document.querySelectorAll(".swatch").forEach((s) => s.classList.toggle("on", s === b));
  });
  document.querySelectorAll('input[name="mode"]').forEach((r) => r.addEventListener("change", () => {
    PLAY.mode = document.querySelector('input[name="mode"]:checked').value;
    $("mode-word").textContent = PLAY.mode;
  }));

  // Walking: a step is one block, a turn 15 degrees (Minecraft: yaw grows turning right).
  function move(kind) {
    const p = PLAY.pose, lim = PLAY.info.pose_limits;
    const yr = p.yaw * Math.PI / 180;
    const fwd = [-Math.sin(yr), Math.cos(yr)], right = [-Math.cos(yr), -Math.sin(yr)];
    const clamp = (v, [lo, hi]) => Math.min(hi, Math.max(lo, v));
    const stepBy = ([dx, dz], s) => { p.x = clamp(p.x + s * dx, lim.x); p.z = clamp(p.z + s * dz, lim.z); };
    if (kind === "forward") stepBy(fwd, 1);
    else if (kind === "back") stepBy(fwd, -1);
    else if (kind === "right") stepBy(right, 1);
    else if (kind === "left") stepBy(right, -1);
    else if (kind === "up") p.y = clamp(p.y + 1, lim.y);
    else if (kind === "down") p.y = clamp(p.y - 1, lim.y);
    else if (kind === "turn-right" || kind === "turn-left") {
      p.yaw += kind === "turn-right" ? 15 : -15;
      if (p.yaw > 180) p.yaw -= 360;
      if (p.yaw <= -180) p.yaw += 360;
    } else if (kind === "look-up") p.pitch = clamp(p.pitch - 10, lim.pitch);
    else if (kind === "look-down") p.pitch = clamp(p.pitch + 10, lim.pitch);
    p.x = Math.round(p.x * 100) / 100;
    p.z = Math.round(p.z * 100) / 100;
    showPose();
    drawBuilder();
    draw();
  }
  $("walk").addEventListener("click", (e) => { const b = e.target.closest("[data-move]"); if (b) move(b.dataset.move); });
  const KEYS = { w: "forward", s: "back", a: "left", d: "right", q: "turn-left", e: "turn-right", r: "up", f: "down",
    t: "look-up", g: "look-down" };
  document.addEventListener("keydown", (e) => {
    if (e.target.closest && e.target.closest("input, textarea, select") || e.ctrlKey || e.metaKey || e.altKey) return;
    const kind = KEYS[e.key.toLowerCase()];
    if (kind && PLAY.pose) { move(kind); e.preventDefault(); }
  });
  $("view-builder").addEventListener("click", () => setView(PLAY.view === "builder" ? "overview" : "builder"));
  $("view-reset").addEventListener("click", () => setView("overview"));

  // Test hooks: the canvas's pixels, a cell's place on screen, what a click there would do.
  PLAY.canvasStats = function () {
    draw();
    const gl = renderer.getContext();
    const w = gl.drawingBufferWidth, h = gl.drawingBufferHeight;
    const px = new Uint8Array(w * h * 4);
    gl.readPixels(0, 0, w, h, gl.RGBA, gl.UNSIGNED_BYTE, px);
    const bg = new THREE.Color(BACKGROUND);
    const [br, bgn, bb] = [bg.r, bg.g, bg.b].map((v) => Math.round(v * 255));
    let differ = 0, colorful = 0, amber = 0;
    for (let k = 0; k < px.length; k += 4) {
      if (Math.abs(px[k] - br) + Math.abs(px[k + 1] - bgn) + Math.abs(px[k + 2] - bb) > 24) differ++;
      if (Math.max(px[k], px[k + 1], px[k + 2]) - Math.min(px[k], px[k + 1], px[k + 2]) > 60) colorful++;
      if (Math.abs(px[k] - 0xd9) + Math.abs(px[k + 1] - 0x77) + Math.abs(px[k + 2] - 0x06) < 40) amber++;
    }
    return { width: w, height: h, non_background: differ, colorful, pending_outline: amber };
  };
  PLAY.screenOf = screenOf;
  PLAY.editAt = editAt;
  PLAY.setView = (v) => setView(v);

  // ---------------------------------------------------------------------------------------
  // Start: the server's settings, then this tab's game (#game=<id>, else a new one)

  async function start() {
    try {
      PLAY.info = await api("GET", "/api/info");
      const info = PLAY.info;
      const last = (path) => String(path).replace(/\/+$/, "").split("/").pop();
      const n = info.parameters;
      const size = n >= 1e6 ? `${(n / 1e6).toFixed(1)} M` : `${Math.round(n / 1e3)} k`;
      $("meta").textContent = `checkpoint ${last(info.run_dir)}, step ${info.step} (${size} parameters) · STOP rule ${info.decode.stop_rule} ` +
        `(threshold ${info.decode.stop_threshold}) · at most ${info.decode.max_actions} actions · games in ${last(info.out)}/ (${info.split})`;
      $("meta").title = `run ${info.run_dir}, games in ${info.out}`;
      startView();
      const m = /^#game=([\w-]+)$/.exec(location.hash);
      let game = null;
      if (m) {
        try { game = await api("GET", `/api/games/${m[1]}`); } catch (err) { status(`${err.message}; started a new game`, "error"); }
      }
      if (!game) game = await api("POST", "/api/games", {});
      PLAY.pose = Object.assign({}, game.pose);
      resize();
      overviewCamera();
      setGame(game, false);
      PLAY.ready = true;
      TIMES.ready = performance.now();
      if (!$("status").textContent) status("ready: type an instruction for the Builder", "ok");
    } catch (err) {
      status(`could not start: ${err.message}`, "error");
      PLAY.start_error = String(err && err.stack || err);
    }
  }
  start();
})();
