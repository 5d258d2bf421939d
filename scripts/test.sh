#!/usr/bin/env bash
# Set up (a virtualenv in .venv, the package with its test extras, Chromium for the browser
# check when this runs as root) and run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ]; then
  # The browser check skips without Chromium; in CI a failed install is an error.
  bash scripts/install_browser.sh || { [ "${CI:-}" = true ] && exit 1; echo "warning: no Chromium, the browser check will skip"; }
fi
python3 -m venv .venv
.venv/bin/python -m pip install --quiet -e '.[test]'
exec .venv/bin/python -m pytest "$@"
