#!/usr/bin/env bash
# Make sure headless Chromium is available for the trace-viewer tests (tests/agent/tracing/test_html.py).
# Idempotent: does nothing when /usr/bin/chromium (or $CHROMIUM) already runs. Installing needs root
# and apt (Debian/Ubuntu, package `chromium`); elsewhere it prints what to do and exits 0, and the
# browser tests skip themselves with that reason.
set -euo pipefail

CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"

if [ -x "$CHROMIUM" ] && "$CHROMIUM" --version >/dev/null 2>&1; then
    echo "chromium: $("$CHROMIUM" --version)"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "chromium missing and apt-get unavailable: install Chromium and set CHROMIUM=/path/to/chromium" >&2
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO="sudo -n"
    else
        echo "chromium missing: run 'apt-get update && apt-get install -y chromium' as root" >&2
        exit 0
    fi
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq chromium >/dev/null
echo "chromium: $("$CHROMIUM" --version)"
