#!/usr/bin/env bash
# Installs what `make test-browser` needs on a fresh machine, and nothing when it is already there:
#   - Debian's Chromium at /usr/bin/chromium (apt-get; no browser download from elsewhere);
#   - a Chinese font (Debian's fonts-wqy-microhei) where the machine has none, for the Chinese edition;
#   - Playwright for Python into the project's venv, from the `browser` extra under constraints.txt.
#     Its pip package carries its own driver, and the tests point it at /usr/bin/chromium, so
#     `playwright install` is never needed.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${VENV:-.venv}"
CHROMIUM="${GPULAB_CHROMIUM:-/usr/bin/chromium}"
STAMP="$VENV/.browser-installed"

if [ ! -x "$CHROMIUM" ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "error: $CHROMIUM is missing and apt-get is not available:" \
             "install Chromium and set GPULAB_CHROMIUM to its path" >&2
        exit 1
    fi
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    echo "Installing Debian's chromium (once)..."
    timeout 600 $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive timeout 900 $SUDO apt-get install -y -qq chromium >/dev/null
fi
"$CHROMIUM" --version 2>/dev/null  # (Debian's wrapper prints a harmless shell warning on stderr)

# A Chinese font, so the Chinese edition's page shows characters, not empty boxes (the browser test checks it).
if command -v fc-list >/dev/null 2>&1 && [ -z "$(fc-list :lang=zh family 2>/dev/null)" ] && command -v apt-get >/dev/null 2>&1; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    echo "Installing a Chinese font, WenQuanYi Micro Hei (once)..."
    DEBIAN_FRONTEND=noninteractive timeout 600 $SUDO apt-get install -y -qq fonts-wqy-microhei >/dev/null \
        || { timeout 600 $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 600 $SUDO apt-get install -y -qq fonts-wqy-microhei >/dev/null; }
fi

if [ ! -x "$VENV/bin/python" ]; then
    echo "error: $VENV/bin/python is missing: run 'make install' first" >&2
    exit 1
fi
# Re-install only when the pins changed since the last install (or Playwright went missing).
if [ ! -f "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ] || [ constraints.txt -nt "$STAMP" ] \
        || ! "$VENV/bin/python" -c "import playwright.sync_api" >/dev/null 2>&1; then
    echo "Installing the browser extra (Playwright) into $VENV..."
    timeout 900 "$VENV/bin/python" -m pip install --quiet -c constraints.txt -e '.[browser]'
    touch "$STAMP"
fi
"$VENV/bin/python" -c "from importlib.metadata import version; print('playwright', version('playwright'))"
