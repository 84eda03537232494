#!/usr/bin/env bash
# Install the pinned Pi coding agent into scripts/pi/node_modules (project-owned, git-ignored).
#
#   bash scripts/install_pi.sh      # prints the absolute path of the pi binary on stdout
#
# Idempotent: it runs `npm ci` only when node_modules is missing or stale (package.json or
# package-lock.json changed since the last install). Without node/npm it says so on stderr,
# prints nothing on stdout and exits 0, so callers can skip what needs Pi.
# Install scripts of dependencies are not run (--ignore-scripts): Pi needs none of them, and
# skipping them keeps the install free of downloads outside the npm registry.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="$here/pi"
bin="$dir/node_modules/.bin/pi"
stamp="$dir/node_modules/.shepherd-install-stamp"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "install_pi: node and npm are required for the Pi coding agent and were not found;" \
         "Pi is not installed (tests marked 'pi' will be skipped)" >&2
    exit 0
fi

# Serialise concurrent installs (two test runs at once): lock this script file itself.
if command -v flock >/dev/null 2>&1; then
    exec 9<"${BASH_SOURCE[0]}"
    flock 9
fi

want="$(cat "$dir/package.json" "$dir/package-lock.json" 2>/dev/null | cksum)"
if [[ -x "$bin" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "$bin"
    exit 0
fi

echo "install_pi: installing the Pi coding agent into $dir/node_modules ..." >&2
cd "$dir"
flags=(--no-audit --no-fund --ignore-scripts --loglevel=error)
if [[ -f package-lock.json ]]; then
    npm ci "${flags[@]}" >&2
else
    npm install "${flags[@]}" >&2
fi
if [[ ! -x "$bin" ]]; then
    echo "install_pi: npm finished but $bin is missing" >&2
    exit 1
fi
# npm install (no lock yet) writes package-lock.json: stamp what is there now.
cat "$dir/package.json" "$dir/package-lock.json" 2>/dev/null | cksum >"$stamp"
echo "install_pi: $(node -p "require('./node_modules/@mariozechner/pi-coding-agent/package.json').version") installed" >&2
echo "$bin"
