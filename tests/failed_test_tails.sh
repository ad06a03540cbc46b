#!/usr/bin/env bash
# Usage: tests/failed_test_tails.sh BUILD_DIR [LINES]
# Prints the last LINES (default 30) lines of output of each test the last
# ctest run in BUILD_DIR recorded as failed (the first three of them), taken
# from ctest's own log.
# A CI log may keep only its tail; deploy/setup.sh prints these tails just
# before its summary so that why a test failed survives with the fact that it did.
set -euo pipefail
build=$1
lines=${2:-30}
failed=$build/Testing/Temporary/LastTestsFailed.log
log=$build/Testing/Temporary/LastTest.log
[[ -f $failed && -f $log ]] || exit 0
while IFS=: read -r _ name; do
  [[ -n $name ]] || continue
  echo "--- last lines of $name:"
  # LastTest.log holds each test's output between its "N/M Test: NAME" line
  # and "<end of output>".
  output=$(awk -v name="$name" '
    $0 ~ /^[0-9]+\/[0-9]+ Test: / { inside = (substr($0, index($0, "Test: ") + 6) == name); next }
    inside && /^<end of output>$/ { inside = 0 }
    inside' "$log")
  # Which cases of a test executable failed (unittest, GoogleTest), then the tail.
  grep -E '^(FAIL|ERROR): |^\[  FAILED  \] ' <<<"$output" | sort -u | head -n 10 || true
  tail -n "$lines" <<<"$output"
done < <(head -n 3 "$failed")
