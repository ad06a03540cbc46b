#!/bin/sh
# Usage: env_dump.sh OUTDIR [ARGS...]: writes OUTDIR/env_<RANK>.txt (env) and args_<RANK>.txt.
out="$1"; shift
env > "$out/.env_${RANK:-none}.tmp" && mv "$out/.env_${RANK:-none}.tmp" "$out/env_${RANK:-none}.txt"
for a in "$@"; do printf '%s\n' "$a"; done > "$out/args_${RANK:-none}.txt"
echo "env_dump.sh rank ${RANK:-none} ok"
