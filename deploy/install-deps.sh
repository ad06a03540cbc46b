#!/usr/bin/env bash
# Installs the Debian packages ddplaunch needs to build, test and benchmark.
# Idempotent: asks dpkg first and calls apt-get only for what is missing, so a
# machine that already has everything returns in well under a second.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config git
  # launcher
  libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  # coordinator protocol
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  # worker runtime: LibTorch, Gloo, a fast BLAS (the reference BLAS is ~16x slower),
  # libdw to symbolize the thread stacks of a hung worker (function, file:line)
  libtorch-dev libgloo-dev libopenblas0-pthread libdw-dev
  # tests and benchmarks: GoogleTest, PyTorch as the peer, process tools
  libgtest-dev libgmock-dev python3 python3-torch procps iproute2 util-linux
)

missing=()
for pkg in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done

if ((${#missing[@]} == 0)); then
  echo "deploy/install-deps.sh: all ${#packages[@]} packages present"
  exit 0
fi

echo "deploy/install-deps.sh: installing ${missing[*]}"
sudo_cmd=()
((EUID == 0)) || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
