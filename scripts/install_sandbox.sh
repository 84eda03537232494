#!/usr/bin/env bash
# `spawn --sandbox` runs an agent's processes in bubblewrap (Debian's package), dropping
# capabilities with util-linux's setpriv; the sandbox's tests need both. Installs bubblewrap
# with apt-get when it is missing; quick when it is there. Fails (exit 1) if it cannot: the
# sandbox tests then fail rather than pass without a sandbox.
set -euo pipefail
if ! command -v bwrap >/dev/null 2>&1; then
    code=0
    bash "$(dirname "${BASH_SOURCE[0]}")/install_apt.sh" bubblewrap || code=$?
    if [ "$code" = 3 ]; then
        echo "install_sandbox: no apt-get here; install bubblewrap (bwrap) yourself" >&2
        exit 1
    fi
    [ "$code" = 0 ] || exit "$code"
fi
for tool in bwrap setpriv mount; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "install_sandbox: $tool is missing (bubblewrap; util-linux for setpriv and mount)" >&2
        exit 1
    fi
done
command -v bwrap
