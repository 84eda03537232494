#!/usr/bin/env bash
# Install the pinned codex-acp (a real ACP agent) into scripts/acp/node_modules (project-owned, git-ignored).
#
#   bash scripts/install_acp.sh      # prints the absolute path of the codex-acp binary on stdout
#
# Idempotent: it runs `npm ci` only when node_modules is missing or stale (package.json or
# package-lock.json changed since the last install). Without node/npm it says so on stderr,
# prints nothing on stdout and exits 0, so callers can skip what needs codex-acp.
# Install scripts of dependencies are not run (--ignore-scripts): codex-acp needs none of them (its binary is a platform package), and
# skipping them keeps the install free of downloads outside the npm registry.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="$here/acp"
bin="$dir/node_modules/.bin/codex-acp"
stamp="$dir/node_modules/.shepherd-install-stamp"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "install_acp: node and npm are required for codex-acp and were not found;" \
         "codex-acp is not installed (the real ACP agent test will fail)" >&2
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

echo "install_acp: installing codex-acp into $dir/node_modules ..." >&2
cd "$dir"
flags=(--no-audit --no-fund --ignore-scripts --loglevel=error)
if [[ -f package-lock.json ]]; then
    npm ci "${flags[@]}" >&2
else
    npm install "${flags[@]}" >&2
fi
if [[ ! -x "$bin" ]]; then
    echo "install_acp: npm finished but $bin is missing" >&2
    exit 1
fi
# npm install (no lock yet) writes package-lock.json: stamp what is there now.
cat "$dir/package.json" "$dir/package-lock.json" 2>/dev/null | cksum >"$stamp"
echo "install_acp: $(node -p "require('./node_modules/@zed-industries/codex-acp/package.json').version") installed" >&2
echo "$bin"
