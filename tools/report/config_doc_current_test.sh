#!/usr/bin/env bash
# docs/configuration.md from its marker line on must be exactly what
# `ps_report config-doc` renders from the key table (common/job_config.cc);
# the hand-written introduction above the marker is the file's own.
set -uo pipefail
REPORT="$TEST_SRCDIR/pstrain/tools/report/ps_report"
DOC="$TEST_SRCDIR/pstrain/docs/configuration.md"
FIX="bazel run //tools/report:ps_report -- config-doc --update docs/configuration.md"
fresh="${TEST_TMPDIR:?}/configuration.md"
cp "$DOC" "$fresh" && chmod u+w "$fresh" || exit 1
if ! "$REPORT" config-doc --update "$fresh" 2>"$TEST_TMPDIR/err"; then
  cat "$TEST_TMPDIR/err"
  echo "FAIL: docs/configuration.md cannot be regenerated (see above): it needs"
  echo "  the line '$("$REPORT" config-doc | head -n 1)' below its introduction"
  exit 1
fi
if ! diff -u "$DOC" "$fresh"; then
  echo "FAIL: docs/configuration.md is stale (the diff above is what the key table"
  echo "  in common/job_config.cc now renders): run, from the repository root,"
  echo "  $FIX"
  exit 1
fi
echo "ok: docs/configuration.md is what ps_report config-doc renders"
