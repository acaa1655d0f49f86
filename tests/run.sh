#!/usr/bin/env bash
# The one test command (README and .ci/run both call it): install what the
# tests need, lint, run the whole suite. Non-zero on any failure, including
# pytest's exit 5 ("no tests ran").
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'
# Tests start their own redis-server on a free port; install it if missing.
if ! command -v redis-server >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq redis-server >/dev/null
fi
python3 -m ruff check .
python3 -m pytest "$@"
