#!/usr/bin/env bash
# Install Debian's headless-capable Chromium for tests/test_ui_browser.py (the UI check).
# Idempotent: does nothing (quickly) when /usr/bin/chromium is already there.
# Needs root (or sudo) and apt; no recommended packages, no prompts.
set -euo pipefail

CHROMIUM=/usr/bin/chromium

if [ -x "$CHROMIUM" ]; then
    echo "install_browser: $CHROMIUM is already installed ($("$CHROMIUM" --version 2>/dev/null || echo 'version unknown')); nothing to do"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_browser: apt-get not found; install Chromium at $CHROMIUM by other means" >&2
    exit 1
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo)
    else
        echo "install_browser: must run as root (or with sudo available) to install chromium" >&2
        exit 1
    fi
fi

echo "install_browser: $CHROMIUM missing; running apt-get update"
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
echo "install_browser: installing chromium (no recommended packages)"
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium
echo "install_browser: installed $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"
