#!/usr/bin/env bash
# Install Debian packages with apt-get (through sudo when not root): what the install scripts
# of the browser and the sandbox share.
#
#   bash scripts/install_apt.sh PACKAGE...      # exit 3 when there is no apt-get here
set -euo pipefail
if ! command -v apt-get >/dev/null 2>&1; then
    exit 3
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
$SUDO apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "$@" >/dev/null
