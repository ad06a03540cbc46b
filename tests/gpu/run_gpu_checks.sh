#!/usr/bin/env bash
# The one script a GPU machine runs: builds ddplaunch against the CUDA build of
# LibTorch that the machine's PyTorch wheel carries and the machine's NCCL,
# runs the gpu-labelled tests, runs the NCCL all-reduce benchmark under
# ddplaunch, and prints a short table last.
#
#   bash tests/gpu/run_gpu_checks.sh            # from the repository root
#
# What the GPU machine has: CUDA, a PyTorch 2.x wheel (LibTorch with c10::cuda,
# and usually the nvidia-nccl wheel), python3, cmake, a C++ compiler. What it
# lacks: gRPC, Protobuf (and protoc/grpc_cpp_plugin), spdlog, fmt, CLI11,
# nlohmann-json, Gloo, GoogleTest. Those come in a carried folder:
#
#   .deps/  (git-ignored, at the repository root; or set DDP_DEPS=/path)
#       the Debian 12 packages of deploy/install-deps.sh's "launcher",
#       "coordinator protocol", Gloo and GoogleTest lines, with their runtime
#       libraries: `bash tests/gpu/fetch_deps.sh` on a Debian machine makes it
#       (about 50 MiB, under what one device call carries).
#       Not Debian's libtorch: the wheel's LibTorch is the one used here.
#
# Environment: DDP_DEPS (default .deps), BUILD_DIR (default build-gpu),
# PYTHON (default python3), BENCH_SIZES (default 1M,16M,256M), JOBS.
# Exit status: 0 when the build, the gpu tests and the benchmark all passed.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo" || exit 1
deps=$(realpath -m "${DDP_DEPS:-$repo/.deps}")
build=$(realpath -m "${BUILD_DIR:-$repo/build-gpu}")
python=${PYTHON:-python3}
sizes=${BENCH_SIZES:-1M,16M,256M}
jobs=${JOBS:-$(nproc)}
logs="$build/gpu-checks"
mkdir -p "$logs"

declare -a rows=()
row() { rows+=("$(printf '%-28s %-8s %s' "$1" "$2" "$3")"); }
overall=0

echo "== machine"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "(no nvidia-smi)"

# ---- LibTorch from the wheel --------------------------------------------------
torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null) || torch_prefix=""
torch_info=$("$python" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "cxx11abi", int(torch._C._GLIBCXX_USE_CXX11_ABI))' 2>/dev/null) || torch_info="none"
echo "== torch: $torch_info ($torch_prefix)"
if [[ -z "$torch_prefix" ]]; then
  row "libtorch (wheel)" FAIL "python3 -c 'import torch' failed"
  overall=1
elif [[ "$torch_info" == *"cxx11abi 0"* ]]; then
  # Debian's gRPC/Protobuf/spdlog use the new std::string ABI; an old-ABI
  # LibTorch (wheels before PyTorch 2.6) cannot share std::string with them.
  echo "warning: this LibTorch uses the pre-C++11 std::string ABI; linking with Debian's libraries will likely fail"
fi

# ---- NCCL: the wheel's, else the system's -------------------------------------
nccl_root=$("$python" -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null) || nccl_root=""
if [[ -z "$nccl_root" ]]; then
  for d in /usr/local/cuda /usr; do [[ -e "$d/include/nccl.h" ]] && nccl_root=$d && break; done
fi
echo "== nccl: ${nccl_root:-not found (CMake will search the default places)}"

# ---- carried Debian packages --------------------------------------------------
arch_lib="$deps/usr/lib/$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)"
if [[ -d "$deps/usr" ]]; then
  export PATH="$deps/usr/bin:$PATH"  # protoc, grpc_cpp_plugin
  export LD_LIBRARY_PATH="$arch_lib:$deps/usr/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  echo "warning: $deps/usr not found: gRPC, Protobuf, spdlog, Gloo... must then be installed on this machine"
fi
# The wheel's LibTorch libraries (and its NCCL) at run time.
if [[ -n "$torch_prefix" ]]; then
  torch_lib="$(dirname "$(dirname "$torch_prefix")")/lib"  # site-packages/torch/lib
  export LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
[[ -n "$nccl_root" && -d "$nccl_root/lib" ]] && export LD_LIBRARY_PATH="$nccl_root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# ---- configure and build ------------------------------------------------------
generator=(-G "Unix Makefiles")
command -v ninja >/dev/null && generator=(-G Ninja)
cmake_args=(
  -S "$repo" -B "$build" "${generator[@]}"
  -DCMAKE_BUILD_TYPE=Release
  "-DCMAKE_PREFIX_PATH=${torch_prefix};$deps/usr"
  -DDDP_WARNINGS_AS_ERRORS=OFF
)
[[ -n "$torch_prefix" ]] && cmake_args+=("-DTorch_DIR=$torch_prefix/Torch")
[[ -n "$nccl_root" ]] && export NCCL_ROOT="$nccl_root"
[[ -d /usr/local/cuda ]] && cmake_args+=(-DCUDAToolkit_ROOT=/usr/local/cuda)

echo "== configure (log: $logs/configure.log)"
configured=0
if cmake "${cmake_args[@]}" >"$logs/configure.log" 2>&1; then
  nccl_line=$(grep -m1 "NCCL backend" "$logs/configure.log" | sed 's/^-- ddplaunch: //')
  configured=1
  row "configure" ok "${nccl_line:-?}"
  [[ "$nccl_line" == *"backend ON"* ]] || overall=1
else
  tail -30 "$logs/configure.log"
  row "configure" FAIL "see $logs/configure.log"
  overall=1
fi

echo "== build (log: $logs/build.log)"
built=0
if [[ $configured -eq 1 ]] && cmake --build "$build" -j "$jobs" >"$logs/build.log" 2>&1; then
  built=1
  row "build" ok "$build"
else
  tail -40 "$logs/build.log" 2>/dev/null
  row "build" FAIL "see $logs/build.log"
  overall=1
fi

# ---- gpu tests ----------------------------------------------------------------
if [[ $built -eq 1 ]]; then
  echo "== ctest -L gpu"
  ctest --test-dir "$build" -L gpu --output-on-failure --timeout 180 2>&1 | tee "$logs/ctest.log"
  rc=${PIPESTATUS[0]}
  summary=$(grep -m1 "tests passed" "$logs/ctest.log" || echo "no summary")
  skipped=$(grep -c "(Skipped)" "$logs/ctest.log")
  failed=$(grep -cE "\((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception)\)" "$logs/ctest.log")
  if [[ $rc -eq 0 ]]; then row "ctest -L gpu" ok "$summary; $skipped skipped"; else row "ctest -L gpu" FAIL "$summary; $failed failed, $skipped skipped"; overall=1; fi
fi

# ---- --nccl-debug and diagnose on a real NCCL init -------------------
if [[ $built -eq 1 ]]; then
  echo "== ddplaunch --nccl-debug=INFO ddptrain --backend nccl, then ddplaunch diagnose --json"
  "$build/launcher/ddplaunch" --nproc-per-node=1 --nccl-debug=INFO --log-dir "$logs/nccl-job" --rdzv-id ncclrun \
    "$build/worker/ddptrain/ddptrain" --backend nccl --device cuda --steps 20 --log-every 10 2>&1 | tee "$logs/ddptrain-nccl.log"
  rc=${PIPESTATUS[0]}
  "$build/launcher/ddplaunch" diagnose "$logs/nccl-job/ncclrun" --json > "$logs/diagnose.json" 2>&1
  diag=$("$python" - "$logs/diagnose.json" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except ValueError:
    print("no JSON"); sys.exit(0)
r0 = [r for r in d.get("ranks", []) if r.get("rank") == 0]
print("rank 0 init complete" if r0 and r0[0].get("init_complete") else "rank 0 NOT complete",
      "|", ", ".join(sorted({t.get("transport", "?") for t in d.get("transports", [])})) or "no transports")
PY
)
  if [[ $rc -eq 0 && "$diag" == "rank 0 init complete"* ]]; then row "ddptrain nccl + diagnose" ok "$diag"; else row "ddptrain nccl + diagnose" FAIL "exit $rc; $diag"; overall=1; fi
fi

# ---- --numa-binding=node on the real GPU ---------------------------
if [[ $built -eq 1 ]]; then
  echo "== ddplaunch --numa-binding=node --nproc-per-node=1: the worker's CPUs against its GPU's NUMA node"
  bus=$(ls /proc/driver/nvidia/gpus 2>/dev/null | sort | head -1 | tr 'A-Z' 'a-z')
  node=$(cat "/sys/bus/pci/devices/$bus/numa_node" 2>/dev/null || echo -1)
  (( node < 0 )) && node=0
  want=$(cat "/sys/devices/system/node/node$node/cpulist" 2>/dev/null || echo "?")
  got=$(CUDA_VISIBLE_DEVICES=0 "$build/launcher/ddplaunch" --numa-binding=node --nproc-per-node=1 --no-python \
        --log-dir "$logs/numa-job" sh -c 'grep Cpus_allowed_list /proc/self/status' 2>"$logs/numa.log" | sed 's/.*:\s*//')
  # The worker's CPUs must lie within the node's (fewer when ddplaunch itself may not use them all).
  within=$("$python" - "$got" "$want" <<'PY'
import sys
def cpus(text):
    out = set()
    for part in filter(None, text.strip().split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out
try:
    got, want = cpus(sys.argv[1]), cpus(sys.argv[2])
    print("yes" if got and got <= want else "no")
except ValueError:
    print("no")
PY
)
  if [[ "$within" == yes ]]; then row "numa-binding=node" ok "GPU $bus, NUMA node $node ($want): worker CPUs $got"
  else row "numa-binding=node" FAIL "worker CPUs '$got', node $node has '$want'; see $logs/numa.log"; overall=1; fi
fi

# ---- the Python companion and PyTorch's NCCL flight recorder --------
if [[ $built -eq 1 ]] && "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "== ddplaunch stacks on a PyTorch NCCL job: the merged stacks and rank_0/nccl_flight_recorder.json"
  PYTHON_EXEC="$python" "$build/launcher/ddplaunch" --nproc-per-node=1 --log-dir "$logs/fr-job" --rdzv-id frjob \
    "$repo/tests/gpu/torch_nccl_flight_recorder.py" >"$logs/fr-job.log" 2>&1 &
  fr_pid=$!
  for _ in $(seq 1 120); do grep -q "ready" "$logs/fr-job.log" && break; sleep 0.5; done
  "$build/launcher/ddplaunch" stacks --job frjob --json >"$logs/fr-stacks.json" 2>>"$logs/fr-job.log"
  for _ in $(seq 1 20); do [[ -s "$logs/fr-job/frjob/attempt_0/rank_0/nccl_flight_recorder.json" ]] && break; sleep 0.5; done
  kill -TERM "$fr_pid" 2>/dev/null; wait "$fr_pid" 2>/dev/null
  fr=$("$python" - "$logs/fr-stacks.json" "$logs/fr-job/frjob/attempt_0/rank_0/nccl_flight_recorder.json" <<'PY'
import json, sys
try:
    groups = json.load(open(sys.argv[1]))["groups"]
    answered = sum(g["count"] for g in groups)
except (OSError, ValueError, KeyError):
    answered = 0
try:
    fr = json.load(open(sys.argv[2]))
    print(f"stacks of {answered} rank | flight recorder: {len(fr.get('entries', []))} entries, {fr.get('summary', '')}")
except (OSError, ValueError):
    print(f"stacks of {answered} rank | no flight-recorder dump (torch < 2.2?)")
PY
)
  if [[ "$fr" == "stacks of 1 rank | flight recorder: "* ]]; then row "companion + NCCL flight rec." ok "$fr"
  else row "companion + NCCL flight rec." FAIL "$fr; see $logs/fr-job.log"; overall=1; fi
fi

# ---- NCCL all-reduce benchmark under ddplaunch --------------------------------
if [[ $built -eq 1 ]]; then
  echo "== ddplaunch --nproc-per-node=1 ddpbench allreduce --backend nccl --sizes $sizes"
  "$build/launcher/ddplaunch" --nproc-per-node=1 --no-python "$build/worker/ddpbench/ddpbench" \
    allreduce --backend nccl --sizes "$sizes" --json 2>&1 | tee "$logs/bench.log"
  rc=${PIPESTATUS[0]}
  bench_rows=$("$python" - "$logs/bench.log" <<'PY'
import json, re, sys
for line in open(sys.argv[1], errors="replace"):
    m = re.search(r"\{.*\"bench\".*\}", line)
    if not m:
        continue
    try:
        r = json.loads(m.group(0))
    except ValueError:
        continue
    print(f"allreduce nccl {r['bytes'] / 2**20:>7.0f} MiB|{'ok' if r.get('correct') else 'WRONG'}|"
          f"{r['seconds'] * 1e6:10.1f} us  algbw {r['algbw_gbps']:8.2f} GB/s  busbw {r['busbw_gbps']:8.2f} GB/s"
          f"  ({r['ranks']} rank, {r['dtype']})")
PY
)
  if [[ -n "$bench_rows" ]]; then
    while IFS='|' read -r name status detail; do row "$name" "$status" "$detail"; done <<<"$bench_rows"
  fi
  if [[ $rc -ne 0 || -z "$bench_rows" ]]; then
    why=$(grep -m1 -iE "error|refused|failed" "$logs/bench.log" | cut -c1-110)
    row "ddpbench allreduce nccl" FAIL "exit $rc: ${why:-see $logs/bench.log}"
    overall=1
  fi
fi

# ---- the table, last ----------------------------------------------------------
echo
echo "== GPU checks: $torch_info; $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
printf '%-28s %-8s %s\n' "check" "result" "detail"
for r in "${rows[@]}"; do echo "$r"; done
exit $overall
