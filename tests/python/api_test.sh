#!/usr/bin/env bash
# Runs api_test.py with the system Python and the package from the runfiles.
set -euo pipefail
ROOT="$TEST_SRCDIR/pstrain"
PYTHONPATH="$ROOT/python" exec /usr/bin/python3 "$ROOT/tests/python/api_test.py"
