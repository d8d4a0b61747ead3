// The build region in three.js, one home for the report's item view (bapjax/report.py inlines
// this file) and the play page (bapjax/play.py serves it): blocks shaded by baked vertex colors
// and drawn with unlit materials (software GL, SwiftShader, compiles their small shaders much
// faster than lit ones, which is most of the time a page takes to open without a GPU), HTML
// labels over the canvas (a sprite per label would cost one more shader program), the renderer and
// camera, the ground with its grid and axis labels, the block / edge / cross geometries, and the Builder's figure.
// World x, y, z = three.js x, y, z; a block at cell (x, y, z) is the unit box [x, x+1] x [y-1, y]
// x [z, z+1], ground at 0; Minecraft yaw 0 faces +z, yaw 90 faces -x; pitch > 0 looks down.
// Needs the three.js bundle first; defines window.bapjaxRegion3D(labelLayer) -> the pieces.
(function () {
  "use strict";
  const LIGHT = new THREE.Vector3(0.35, 0.85, 0.45).normalize(); // from above, front right
  const EYE = 1.62; // eye height above the feet; the feet are at pose y - 1
  const BACKGROUND = 0xf4f6f8;
  const TARGET = new THREE.Vector3(0.5, 2.0, 0.5); // the build region's center column
  const PIXEL_RATIO = Math.min(window.devicePixelRatio || 1, 2);

  function shaded(geometry) {
    const normal = geometry.attributes.normal;
    const colors = new Float32Array(normal.count * 3);
    for (let k = 0; k < normal.count; k++) {
      const d = normal.getX(k) * LIGHT.x + normal.getY(k) * LIGHT.y + normal.getZ(k) * LIGHT.z;
      colors.fill(0.6 + 0.4 * Math.max(0, d), 3 * k, 3 * k + 3);
    }
    geometry.setAttribute("color", new THREE.Float32BufferAttribute(colors, 3));
    return geometry;
  }

  function viewDirection(yaw, pitch) {
    const yr = yaw * Math.PI / 180, pr = pitch * Math.PI / 180;
    return new THREE.Vector3(-Math.sin(yr) * Math.cos(pr), -Math.sin(pr), Math.cos(yr) * Math.cos(pr));
  }

  window.bapjaxRegion3D = function (labelLayer) {
    const materials = new Map();
    function material(key, make) {
      if (!materials.has(key)) materials.set(key, make());
      return materials.get(key);
    }
    const flat = (color, extra) => new THREE.MeshBasicMaterial(Object.assign({ color, vertexColors: true }, extra || {}));
    const line = (hex) => material("line" + hex, () => new THREE.LineBasicMaterial({ color: hex }));

    // Labels: `extra` fields are kept on the entry (e.g. the report's per-item flag); an entry whose
    // element has data-hidden="1" is not shown.
    const labels = [];
    function label(text, color, position, extra) {
      const el = document.createElement("span");
      el.textContent = text;
      el.style.color = color;
      labelLayer.appendChild(el);
      const entry = Object.assign({ el, position }, extra || {});
      labels.push(entry);
      return entry;
    }
    function placeLabels(camera, canvas) {
      const w = canvas.clientWidth, h = canvas.clientHeight;
      const v = new THREE.Vector3();
      for (const { el, position } of labels) {
        v.copy(position).project(camera);
        const visible = v.z < 1 && Math.abs(v.x) < 1.1 && Math.abs(v.y) < 1.1 && el.dataset.hidden !== "1";
        el.style.display = visible ? "" : "none";
        el.style.transform = `translate(${((v.x + 1) / 2) * w}px, ${((1 - v.y) / 2) * h}px) translate(-50%, -50%)`;
      }
    }
    function dropLabels(which) {
      for (let k = labels.length - 1; k >= 0; k--) {
        if (which(labels[k])) { labels[k].el.remove(); labels.splice(k, 1); }
      }
    }

    // The build region: ground 11 x 11 at y = 0 with a grid, axis labels.
    function addRegion(scene) {
      const ground = new THREE.Mesh(shaded(new THREE.PlaneGeometry(11, 11)), flat(0xe4e8ed));
      ground.rotation.x = -Math.PI / 2;
      ground.position.set(0.5, -0.001, 0.5);
      scene.add(ground);
      const gridPoints = [];
      for (let k = -5; k <= 6; k++) gridPoints.push(k, 0.002, -5, k, 0.002, 6, -5, 0.002, k, 6, 0.002, k);
      const gridGeometry = new THREE.BufferGeometry();
      gridGeometry.setAttribute("position", new THREE.Float32BufferAttribute(gridPoints, 3));
      scene.add(new THREE.LineSegments(gridGeometry, line(0xffffff)));
      [["+x", 7.0, 0.5, "#b42318"], ["-x", -6.0, 0.5, "#b42318"], ["+z", 0.5, 7.0, "#1a6fb4"], ["-z", 0.5, -6.0, "#1a6fb4"]]
        .forEach(([t, x, z, color]) => label(t, color, new THREE.Vector3(x, 0.2, z)));
    }

    // The renderer, the scene with the build region, and a camera orbiting the region's center
    // column (OrbitControls calling `onChange`). The drawing buffer gets its final size before the
    // context exists: resizing it later costs a round trip to the GPU process (and a reallocation).
    function makeView(canvas, fov, near, onChange) {
      canvas.width = Math.floor((canvas.clientWidth || 600) * PIXEL_RATIO);
      canvas.height = Math.floor((canvas.clientHeight || 400) * PIXEL_RATIO);
      const renderer = new THREE.WebGLRenderer({ canvas, antialias: true, preserveDrawingBuffer: true });
      renderer.setPixelRatio(PIXEL_RATIO);
      const scene = new THREE.Scene();
      scene.background = new THREE.Color(BACKGROUND);
      const camera = new THREE.PerspectiveCamera(fov, 1, near, 200);
      const controls = new THREE.OrbitControls(camera, canvas);
      controls.target.copy(TARGET);
      controls.addEventListener("change", onChange);
      addRegion(scene);
      return { renderer, scene, camera, controls };
    }
    // The drawing buffer and the camera's aspect after the canvas changed size.
    function fit(canvas, renderer, camera) {
      const w = canvas.clientWidth || 600, h = canvas.clientHeight || 400;
      if (canvas.width !== Math.floor(w * PIXEL_RATIO) || canvas.height !== Math.floor(h * PIXEL_RATIO)) {
        renderer.setSize(w, h, false);
      }
      camera.aspect = w / h;
      camera.updateProjectionMatrix();
    }

    // A unit block, its edges and a removal's cross (the block's two diagonals per axis pair).
    function geometries() {
      const BOX = shaded(new THREE.BoxGeometry(1, 1, 1));
      const EDGES = new THREE.EdgesGeometry(BOX);
      const CROSS = new THREE.BufferGeometry();
      const h = 0.5;
      CROSS.setAttribute("position", new THREE.Float32BufferAttribute(
        [-h, -h, -h, h, h, h, h, -h, -h, -h, h, h, -h, -h, h, h, h, -h, h, -h, h, -h, h, -h], 3));
      return { BOX, EDGES, CROSS };
    }

    // The Builder at pose (x, y, z, yaw, pitch): body from the feet to the eyes, head, and the view
    // arrow (a shaft and a cone: cylinders, the blocks' shader program). -> {group, eye}
    function builderFigure(x, y, z, yaw, pitch) {
      const dark = material("builder", () => flat(0x3d444d));
      const eye = new THREE.Vector3(x, y - 1 + EYE, z);
      const body = new THREE.Mesh(shaded(new THREE.CylinderGeometry(0.22, 0.22, 1.45, 12)), dark);
      body.position.set(x, y - 1 + 0.725, z);
      const head = new THREE.Mesh(shaded(new THREE.SphereGeometry(0.2, 12, 8)), dark);
      head.position.copy(eye);
      const dir = viewDirection(yaw, pitch);
      const up = new THREE.Vector3(0, 1, 0);
      const shaft = new THREE.Mesh(shaded(new THREE.CylinderGeometry(0.05, 0.05, 2.1, 8)), dark);
      shaft.position.copy(eye).addScaledVector(dir, 1.05);
      shaft.quaternion.setFromUnitVectors(up, dir);
      const cone = new THREE.Mesh(shaded(new THREE.CylinderGeometry(0, 0.17, 0.5, 12)), dark);
      cone.position.copy(eye).addScaledVector(dir, 2.35);
      cone.quaternion.setFromUnitVectors(up, dir);
      const group = new THREE.Group();
      group.add(body, head, shaft, cone);
      return { group, eye };
    }

    return { EYE, BACKGROUND, TARGET, shaded, flat, material, line, label, placeLabels, dropLabels, makeView, fit,
      geometries, builderFigure, viewDirection };
  };
})();
