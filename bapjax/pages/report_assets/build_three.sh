#!/usr/bin/env bash
# Rebuilds three-<version>.min.js from the npm registry: three.js and esbuild pinned, the parts
# listed in three_entry.js bundled into one classic script (global THREE), minified.
#   bash bapjax/pages/report_assets/build_three.sh  (then update THREE_VERSION in bapjax/pages/report_page.py)
set -euo pipefail
THREE_VERSION=0.187.0
ESBUILD_VERSION=0.28.2
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
npm init -y >/dev/null
npm install --no-audit --no-fund --silent "three@$THREE_VERSION" "esbuild@$ESBUILD_VERSION"
cp "$here/three_entry.js" entry.js
node_modules/.bin/esbuild entry.js --bundle --format=iife --global-name=THREE --minify \
  --legal-comments=none --log-level=warning --outfile="$here/three-$THREE_VERSION.min.js"
cp node_modules/three/LICENSE "$here/three-LICENSE.txt"
sha256sum "$here/three-$THREE_VERSION.min.js"
