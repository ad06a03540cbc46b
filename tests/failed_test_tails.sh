#!/usr/bin/env bash
# Usage: tests/failed_test_tails.sh [--why] BUILD_DIR [LINES]
# Prints the last LINES (default 30) lines of output of each test the last
# ctest run in BUILD_DIR recorded as failed (the first three of them), taken
# from ctest's own log. With --why, one line per failed test instead: which
# cases failed and the first error message, for the summary.
# A CI log may keep only its tail; deploy/setup.sh prints these tails just
# before its summary, and the --why lines in it, so that why a test failed
# survives with the fact that it did.
set -euo pipefail
why=false
if [[ ${1-} == --why ]]; then why=true; shift; fi
build=$1
lines=${2:-30}
failed=$build/Testing/Temporary/LastTestsFailed.log
log=$build/Testing/Temporary/LastTest.log
[[ -f $failed && -f $log ]] || exit 0
while IFS=: read -r _ name; do
  [[ -n $name ]] || continue
  # LastTest.log holds each test's output between its "N/M Test: NAME" line
  # and "<end of output>".
  output=$(awk -v name="$name" '
    $0 ~ /^[0-9]+\/[0-9]+ Test: / { inside = (substr($0, index($0, "Test: ") + 6) == name); next }
    inside && /^<end of output>$/ { inside = 0 }
    inside' "$log")
  # Which cases of a test executable failed (unittest, GoogleTest).
  cases=$(grep -E '^(FAIL|ERROR): |^\[  FAILED  \] ' <<<"$output" | sort -u | head -n 10 || true)
  if $why; then
    # unittest's "SomeError: message", or the lines after GoogleTest's "file:line: Failure".
    error=$(grep -m1 -E '^[A-Za-z_.]*(Error|Exception): ' <<<"$output" ||
            grep -m1 -A3 -E ': Failure$' <<<"$output" | tail -n +2 || true)
    case_names=$(sed -E 's/^(FAIL|ERROR): ([^ ]+).*/\2/; s/^\[  FAILED  \] ([^ ]+).*/\1/' <<<"$cases" | sort -u)
    printf '    %s: %s: %s\n' "$name" "$(paste -sd' ' <<<"$case_names")" "$(tr '\n' ' ' <<<"$error" | head -c 400)"
    continue
  fi
  echo "--- last lines of $name:"
  [[ -n $cases ]] && echo "$cases"
  tail -n "$lines" <<<"$output"
done < <(head -n 3 "$failed")
