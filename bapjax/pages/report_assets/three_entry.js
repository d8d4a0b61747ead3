// The three.js parts the report uses, bundled into one classic script (global THREE) so the
// report opens from disk: Chromium refuses ES modules from file:// pages. See README.md here.
export {
  BackSide, BoxGeometry, BufferGeometry, Color,
  CylinderGeometry, EdgesGeometry, Float32BufferAttribute, Group,
  LineBasicMaterial, LineSegments, Mesh, MeshBasicMaterial, PerspectiveCamera,
  PlaneGeometry, REVISION, Scene, SphereGeometry, Vector3, WebGLRenderer,
} from "three";
export { OrbitControls } from "three/examples/jsm/controls/OrbitControls.js";
