#!/usr/bin/env bash
# Runs export_test.py (an independent json+struct reader) with the system
# Python against ps_checkpoint and a freshly trained test checkpoint.
set -euo pipefail
ROOT="$TEST_SRCDIR/pstrain/tools/checkpoint"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
exec /usr/bin/python3 "$ROOT/export_test.py" "$ROOT/ps_checkpoint" \
  "$ROOT/make_test_checkpoint" "$TMP"
