#!/usr/bin/env bash
# Install the pinned Pi coding agent into scripts/pi/node_modules (project-owned, git-ignored).
#
#   bash scripts/install_pi.sh      # prints the absolute path of the pi binary on stdout
#
# Idempotent, and without node/npm a note on stderr and exit 0: scripts/install_npm.sh.
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/install_npm.sh" install_pi "the Pi coding agent" pi pi \
    @mariozechner/pi-coding-agent "tests marked 'pi' will be skipped"
