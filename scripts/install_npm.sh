#!/usr/bin/env bash
# Install one pinned npm package set into scripts/DIR/node_modules (project-owned, git-ignored):
# what scripts/install_pi.sh and scripts/install_acp.sh share.
#
#   bash scripts/install_npm.sh LABEL TITLE DIR BIN PACKAGE WITHOUT
#
# LABEL names the caller in messages, TITLE what is installed, BIN the binary in
# node_modules/.bin, PACKAGE the package whose version is reported, WITHOUT what happens
# without it. Prints the absolute path of BIN on stdout.
#
# Idempotent: it runs `npm ci` only when node_modules is missing or stale (package.json or
# package-lock.json changed since the last install). Without node/npm it says so on stderr,
# prints nothing on stdout and exits 0, so callers can skip what needs it.
# Install scripts of dependencies are not run (--ignore-scripts): none of these needs them, and
# skipping them keeps the install free of downloads outside the npm registry.
set -euo pipefail

label="$1" title="$2" sub="$3" name="$4" package="$5" without="$6"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="$here/$sub"
bin="$dir/node_modules/.bin/$name"
stamp="$dir/node_modules/.shepherd-install-stamp"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "$label: node and npm are required for $title and were not found;" \
         "it is not installed ($without)" >&2
    exit 0
fi

# Serialise concurrent installs (two test runs at once): lock the package set's directory.
if command -v flock >/dev/null 2>&1; then
    exec 9<"$dir/package.json"
    flock 9
fi

want="$(cat "$dir/package.json" "$dir/package-lock.json" 2>/dev/null | cksum)"
if [[ -x "$bin" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "$bin"
    exit 0
fi

echo "$label: installing $title into $dir/node_modules ..." >&2
cd "$dir"
flags=(--no-audit --no-fund --ignore-scripts --loglevel=error)
if [[ -f package-lock.json ]]; then
    npm ci "${flags[@]}" >&2
else
    npm install "${flags[@]}" >&2
fi
if [[ ! -x "$bin" ]]; then
    echo "$label: npm finished but $bin is missing" >&2
    exit 1
fi
# npm install (no lock yet) writes package-lock.json: stamp what is there now.
cat "$dir/package.json" "$dir/package-lock.json" 2>/dev/null | cksum >"$stamp"
echo "$label: $(node -p "require('./node_modules/$package/package.json').version") installed" >&2
echo "$bin"
