#!/usr/bin/env bash
# The sanitizer stages of the test suite, run by `deploy/setup.sh test` after
# the normal suite (so by .ci/run):
#
#   tests/sanitizers/run.sh address [MAIN_BUILD_DIR]
#       AddressSanitizer + UndefinedBehaviorSanitizer (+ LeakSanitizer) over
#       the unit, multirank and ddptrain test executables, then the launcher
#       (and ddptrain) built with them in a subset of the integration tests.
#   tests/sanitizers/run.sh thread [MAIN_BUILD_DIR]
#       ThreadSanitizer over the unit and multirank test executables: the
#       coordinator, hang detector, supervisor, reducer and shared-memory
#       all-reduce, with suppressions (tsan.supp) only where an uninstrumented
#       system library is at fault.
#
# Each stage configures its own tree beside the main one (MAIN-asan,
# MAIN-tsan) and builds only what it runs; ccache keeps a rebuild cheap.
# There each test executable is one ctest (tests/CMakeLists.txt's
# ddp_add_gtest_executable): its tests run in one process, as a sanitizer
# makes every process start slow.
# Every sanitizer report goes to a file under the stage's report folder as
# well as failing its test: a report from a process no test waited on (an
# agent, a rank) still fails the stage. Prints the time each part took.
set -euo pipefail

mode=${1:?usage: tests/sanitizers/run.sh address|thread [MAIN_BUILD_DIR]}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
main_build=${2:-${DDP_BUILD_DIR:-$repo/build}}
jobs=${DDP_JOBS:-$(nproc)}
here=$repo/tests/sanitizers
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$repo}
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
export PYTHON_EXEC=${PYTHON_EXEC:-/usr/bin/python3}

# The runtime's tests are built only where LibTorch is (DDP_HAVE_RUNTIME).
unit_targets=(launcher_unit_tests)
runtime_targets=(multirank_collective_tests multirank_reducer_tests runtime_thread_stacks_tests)
case "$mode" in
  address)
    build=$main_build-asan
    sanitize=address,undefined
    targets=("${unit_targets[@]}" "${runtime_targets[@]}" ddptrain_unit_tests ddplaunch ddpbench ddptrain)
    # The launcher's own integration tests that cover most of its code in
    # little time: spawning, env, failure reports, signals, restarts, output
    # routing, usage errors, detached jobs, TLS and multi-node rendezvous.
    exclude=
    integration='^integration\.(test_env|test_failures|test_signals|test_restarts|test_output|test_usage|test_detached_jobs|test_tls|test_multinode)$'
    ;;
  thread)
    build=$main_build-tsan
    sanitize=thread
    targets=("${unit_targets[@]}" "${runtime_targets[@]}")
    integration=
    # ddptrain's tests are not built here.
    exclude='|^ddptrain_unit_tests$'
    # TSan holds an asynchronous signal until the thread reaches one of its
    # own safe points; the stack capture signals every thread and expects an
    # answer within 500 ms from a thread blocked in a call, which TSan delays.
    # (runtime_thread_stacks_tests is one ctest: its other tests still run.)
    export GTEST_FILTER='-ThreadStacksTest.*'
    ;;
  *)
    echo "tests/sanitizers/run.sh: error: unknown stage '$mode' (address or thread)" >&2
    exit 2
    ;;
esac

reports=$build/sanitizer-reports
rm -rf "$reports"
mkdir -p "$reports"
common="log_path=$reports/report:log_exe_name=1:print_stacktrace=1"
export ASAN_OPTIONS="$common:detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1"
export LSAN_OPTIONS="$common:suppressions=$here/lsan.supp"
export UBSAN_OPTIONS="$common:halt_on_error=1"
export TSAN_OPTIONS="$common:halt_on_error=1:second_deadlock_stack=1:suppressions=$here/tsan.supp"

t0=$SECONDS
cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDDP_SANITIZE="$sanitize" >/dev/null
# Without LibTorch the runtime's targets do not exist: build what does.
known=$(cmake --build "$build" --target help)
available=()
for t in "${targets[@]}"; do
  if grep -q "^$t:" <<<"$known"; then
    available+=("$t")
  fi
done
cmake --build "$build" -j "$jobs" --target "${available[@]}"
t_build=$((SECONDS - t0))

status=0
failed=()
why_lines=""  # one line per failed test (failed_test_tails.sh --why), for the summary
# Names the tests the last ctest run in $build recorded as failed.
collect_failed() {
  local list=$build/Testing/Temporary/LastTestsFailed.log
  # DDP_TEST_TAILS: deploy/setup.sh's file of the failed tests' last lines.
  bash "$(dirname "${BASH_SOURCE[0]}")/../failed_test_tails.sh" "$build" >>"${DDP_TEST_TAILS:-/dev/null}"
  why_lines+=$(bash "$(dirname "${BASH_SOURCE[0]}")/../failed_test_tails.sh" --why "$build")$'\n'
  [[ -f $list ]] && mapfile -t -O "${#failed[@]}" failed < <(cut -d: -f2- "$list")
  rm -f "$list"
}
rm -f "$build/Testing/Temporary/LastTestsFailed.log"
t0=$SECONDS
# The C++ test executables only: the fuzz smoke tests have their own
# sanitizers, the companion's tests are Python.
(cd "$build" && ctest --output-on-failure -L 'unit|multirank' -E "_smoke\$|^companion\\.$exclude") || { status=1; collect_failed; }
t_tests=$((SECONDS - t0))

t_integration=0
if [[ -n "$integration" ]]; then
  t0=$SECONDS
  (cd "$build" && ctest --output-on-failure -R "$integration") || { status=1; collect_failed; }
  t_integration=$((SECONDS - t0))
fi

if compgen -G "$reports/*" >/dev/null; then
  echo "sanitizers ($mode): reports:" >&2
  for f in "$reports"/*; do
    echo "==> $f" >&2
    cat "$f" >&2
  done
  status=1
fi
result=passed
if [[ $status != 0 ]]; then
  result="FAILED: ${failed[*]:-sanitizer reports above}"
fi
# DDP_TEST_SUMMARY: deploy/setup.sh's file of one line per part of the suite.
echo "sanitizers ($mode): build ${t_build} s, test executables ${t_tests} s, integration ${t_integration} s: $result" |
  tee -a "${DDP_TEST_SUMMARY:-/dev/null}"
[[ -z ${why_lines//$'\n'/} ]] || grep -v '^$' <<<"$why_lines" | tee -a "${DDP_TEST_SUMMARY:-/dev/null}"
exit $status
