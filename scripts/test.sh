#!/usr/bin/env bash
# Install pydla with its test dependencies (and Chromium for the report test), run the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
        || echo "chromium could not be installed; the report rendering test will skip"
fi
pip install -q ".[test]"
python -m pytest -n 2 -p no:cacheprovider "$@"
