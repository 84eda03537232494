#!/usr/bin/env bash
# Install the pinned codex-acp (a real ACP agent) into scripts/acp/node_modules (project-owned,
# git-ignored).
#
#   bash scripts/install_acp.sh      # prints the absolute path of the codex-acp binary on stdout
#
# Idempotent, and without node/npm a note on stderr and exit 0: scripts/install_npm.sh.
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/install_npm.sh" install_acp codex-acp acp codex-acp \
    @zed-industries/codex-acp "the real ACP agent test will fail"
