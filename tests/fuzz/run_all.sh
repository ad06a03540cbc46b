#!/bin/sh
# Exploratory fuzzing: runs every fuzz target built under BUILD_DIR (default:
# build) for SECONDS each, one after the other (the machine may be small),
# each with a fresh random seed over a copy of its seed corpus, and prints
# one line per target, e.g.
#   slurm_nodelist_fuzz        seed=2893405112 runs=42498 cov=209 crashes=0
# A crash is anything libFuzzer stops for: a sanitizer report, a broken
# invariant (FUZZ_CHECK), a timeout (-timeout=25 s per input) or running out
# of memory (-rss_limit_mb=2048). The input that did it and the log stay in
# OUT_DIR (default: a new temporary directory), named in the line; rerun
# one with `BUILD_DIR/tests/fuzz/bin/<target> <input>`.
# Exits 1 if any target crashed, 2 on bad usage or when no target is built.
#
# Usage: tests/fuzz/run_all.sh SECONDS [BUILD_DIR]
# Build the targets first, e.g.
#   cmake --build build --target slurm_nodelist_fuzz s3_xml_fuzz ...
# Each target's seed corpus and extra flags come from the <target>.manifest
# that CMake (tests/fuzz/CMakeLists.txt) writes beside it.

set -u

if [ $# -lt 1 ] || [ $# -gt 2 ] || ! [ "$1" -gt 0 ] 2>/dev/null; then
  echo "usage: $0 SECONDS [BUILD_DIR]" >&2
  exit 2
fi
seconds=$1
build=${2:-build}
bin=$build/tests/fuzz/bin
out=${OUT_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/ddp-fuzz.XXXXXX")}
mkdir -p "$out"

found=0
failed=0
for manifest in "$bin"/*.manifest; do
  [ -e "$manifest" ] || continue
  name=$(basename "$manifest" .manifest)
  exe=$bin/$name
  if [ ! -x "$exe" ]; then
    printf '%-26s not built\n' "$name"
    continue
  fi
  found=$((found + 1))
  seeds=$(sed -n 's/^seeds=//p' "$manifest")
  args=$(sed -n 's/^args=//p' "$manifest")
  corpus=$out/$name.corpus
  rm -rf "$corpus"
  mkdir -p "$corpus"
  cp -R "$seeds"/. "$corpus"/
  # libFuzzer takes 0 as "pick one"; pick it here so that the line can say it.
  seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
  [ "$seed" -eq 0 ] && seed=1
  log=$out/$name.log
  # $args unquoted on purpose: zero or more flags.
  # shellcheck disable=SC2086
  "$exe" -seed="$seed" -max_total_time="$seconds" -timeout=25 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$out/$name-" $args "$corpus" >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | sed 's/cov: //')
  crashes=$(find "$out" -maxdepth 1 \( -name "$name-crash-*" -o -name "$name-leak-*" -o -name "$name-timeout-*" \
    -o -name "$name-oom-*" \) | wc -l)
  if [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ]; then
    crashes=1  # stopped without leaving an input (e.g. killed): still a failure
  fi
  line=$(printf '%-26s seed=%s runs=%s cov=%s crashes=%s' "$name" "$seed" "${runs:-?}" "${cov:-?}" "$crashes")
  if [ "$crashes" -ne 0 ]; then
    failed=1
    line="$line  (log: $log)"
  fi
  echo "$line"
done

if [ "$found" -eq 0 ]; then
  echo "no fuzz target built under $bin" >&2
  exit 2
fi
echo "logs, corpora and crashing inputs: $out"
exit "$failed"
