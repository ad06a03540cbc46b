#!/bin/sh
# Usage: sleeper.sh OUTDIR: writes pid_<RANK> and child_<RANK> (pid of a child `sleep`),
# then ready_<RANK>, and waits forever.
out="$1"
echo $$ > "$out/.pid_$RANK" && mv "$out/.pid_$RANK" "$out/pid_$RANK"
sleep 300 &
echo $! > "$out/.child_$RANK" && mv "$out/.child_$RANK" "$out/child_$RANK"
echo ready > "$out/.ready_$RANK" && mv "$out/.ready_$RANK" "$out/ready_$RANK"
echo "rank $RANK sleeping"
wait
