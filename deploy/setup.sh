#!/usr/bin/env bash
# One command from a fresh Debian machine to a result:
#   deploy/setup.sh main   install what is missing, build, run the main job
#   deploy/setup.sh test   install what is missing, build, run the whole test suite
#                          (then its sanitizer stages: tests/sanitizers/run.sh)
# Re-running is cheap: packages already present are skipped and ccache keeps
# the objects of earlier builds.
set -euo pipefail

mode=${1:-main}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${DDP_BUILD_DIR:-$repo/build}
jobs=${DDP_JOBS:-$(nproc)}
# Debian's python3 has torch; the first python3 on PATH may be another one.
export PYTHON_EXEC=${PYTHON_EXEC:-/usr/bin/python3}

bash "$repo/deploy/install-deps.sh"

# ccache across clones: paths relative to the checkout, so a fresh clone (CI)
# reuses the objects an earlier clone compiled.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$repo}
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}

cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
# The main job needs the launcher and the trainer only; the tests need everything.
case "$mode" in
  main) cmake --build "$build" -j "$jobs" --target ddplaunch ddptrain ;;
  *) cmake --build "$build" -j "$jobs" ;;
esac

case "$mode" in
  main)
    # The main job: ddptrain, a real 4-rank data-parallel training on CPU
    # (the runtime's DDP over Gloo): an MLP learning a synthetic teacher.
    exec "$build/launcher/ddplaunch" --nproc-per-node=4 --log-dir "$build/logs" \
      "$build/worker/ddptrain/ddptrain" --mlp-sizes 32,256,256,10 --steps 300 \
      --lr 0.05 --momentum 0.9 --lr-schedule cosine --warmup-steps 20 --log-every 50
    ;;
  test)
    # One test at a time: integration tests time the launcher's reactions.
    # Then the sanitizer stages (tests/sanitizers/run.sh), each in its own
    # build tree; DDP_SANITIZER_STAGES="" skips them on a developer's machine.
    # A CI log may keep only its tail, so the last lines repeat the end of
    # each failed test's output, then each part's result with the names of
    # the tests that failed in it.
    export DDP_TEST_SUMMARY=$build/test-summary.txt DDP_TEST_TAILS=$build/failed-test-tails.txt
    rm -f "$DDP_TEST_SUMMARY" "$DDP_TEST_TAILS"
    status=0
    t0=$SECONDS
    failed_list=$build/Testing/Temporary/LastTestsFailed.log
    rm -f "$failed_list"
    (cd "$build" && ctest --output-on-failure) || { status=1; bash "$repo/tests/failed_test_tails.sh" "$build" >>"$DDP_TEST_TAILS"; }
    echo "test suite: $((SECONDS - t0)) s: $([[ $status == 0 ]] && echo passed || echo "FAILED: $(tr '\n' ' ' <"$failed_list" 2>/dev/null)")" |
      tee -a "$DDP_TEST_SUMMARY"
    [[ $status == 0 ]] || bash "$repo/tests/failed_test_tails.sh" --why "$build" >>"$DDP_TEST_SUMMARY"
    for stage in ${DDP_SANITIZER_STAGES-address thread}; do
      bash "$repo/tests/sanitizers/run.sh" "$stage" "$build" || status=1
    done
    [[ -s $DDP_TEST_TAILS ]] && cat "$DDP_TEST_TAILS"
    echo "summary:"
    sed 's/^/  /' "$DDP_TEST_SUMMARY"
    exit $status
    ;;
  *)
    echo "usage: deploy/setup.sh main|test" >&2
    exit 2
    ;;
esac
