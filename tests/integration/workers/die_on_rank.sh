#!/bin/sh
# Usage: die_on_rank.sh MODE FAIL_RANK OUTDIR [DELAY]
#   MODE: exit:N (exit with code N) or kill:SIG (kill itself with signal SIG, e.g. kill:9)
# Every rank writes OUTDIR/pid_<RANK>. FAIL_RANK waits DELAY (default 0.5 s), prints a
# line to stderr and dies as MODE says; the other ranks exec `sleep 60` (same pid).
mode="$1"; fail_rank="$2"; out="$3"; delay="${4:-0.5}"
echo $$ > "$out/.pid_$RANK" && mv "$out/.pid_$RANK" "$out/pid_$RANK"
if [ "$RANK" = "$fail_rank" ]; then
    sleep "$delay"
    echo "first stderr line of rank $RANK" >&2
    echo "rank $RANK is failing on purpose ($mode)" >&2
    case "$mode" in
        exit:*) exit "${mode#exit:}" ;;
        kill:*) kill -"${mode#kill:}" $$; sleep 5; exit 99 ;;
    esac
    exit 98
fi
echo "rank $RANK waiting"
exec sleep 60
