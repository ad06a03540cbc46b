#!/bin/sh
# Usage: restart_worker.sh OUTDIR SUCCEED_AT FAIL_RANK CODE
# Records OUTDIR/attempt_<TORCHELASTIC_RESTART_COUNT>_rank_<RANK> (containing the env facts).
# While TORCHELASTIC_RESTART_COUNT < SUCCEED_AT, FAIL_RANK exits CODE (after 0.3 s) and the
# other ranks sleep (and get torn down); from attempt SUCCEED_AT on, every rank exits 0.
out="$1"; succeed_at="$2"; fail_rank="$3"; code="$4"
n="$TORCHELASTIC_RESTART_COUNT"
printf 'restart_count=%s\nattempt=%s\nmax_restarts=%s\njob=%s\npid=%s\nrank_log_dir=%s\n' \
    "$n" "$DDPLAUNCH_ATTEMPT" "$TORCHELASTIC_MAX_RESTARTS" "$TORCHELASTIC_RUN_ID" "$$" \
    "$DDPLAUNCH_RANK_LOG_DIR" > "$out/.a_${n}_$RANK"
mv "$out/.a_${n}_$RANK" "$out/attempt_${n}_rank_$RANK"
echo "rank $RANK attempt $n"
if [ "$n" -ge "$succeed_at" ]; then
    exit 0
fi
if [ "$RANK" = "$fail_rank" ]; then
    sleep 0.3
    echo "rank $RANK failing in attempt $n" >&2
    exit "$code"
fi
exec sleep 60
