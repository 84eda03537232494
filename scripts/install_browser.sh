#!/usr/bin/env bash
# The board's browser tests drive Debian's Chromium with its driver (selenium, from the test
# extra). Installs them with apt-get when missing; quick when they are already there.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    exit 0
fi
code=0
bash "$(dirname "${BASH_SOURCE[0]}")/install_apt.sh" chromium chromium-driver || code=$?
if [ "$code" = 3 ]; then
    echo "install_browser: no apt-get here; install chromium and chromedriver yourself" >&2
    exit 0
fi
exit "$code"
