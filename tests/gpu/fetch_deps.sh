#!/usr/bin/env bash
# Prepares the folder that tests/gpu/run_gpu_checks.sh needs on a GPU machine
# that lacks gRPC, Protobuf, spdlog, fmt, CLI11, nlohmann-json, Gloo and
# GoogleTest: downloads their Debian packages here (apt-get download, no root
# needed) with every library they pull in beyond the base system, extracts
# them with dpkg -x, drops documentation, and checks that the result fits what
# one device call can carry.
#
#   bash tests/gpu/fetch_deps.sh        # then: run ... carry=[".deps"]
#
# Environment: DDP_DEPS (default .deps at the repository root, git-ignored),
# DDP_DEPS_LIMIT_MB (default 60: a device call carries 64 MiB in all).
# Exit status: 0 when the folder is complete and small enough; 1 otherwise.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
deps=$(realpath -m "${DDP_DEPS:-$repo/.deps}")
limit_mb=${DDP_DEPS_LIMIT_MB:-60}

# What the build needs from Debian on the GPU machine (LibTorch and NCCL come
# from the machine's PyTorch wheel and CUDA instead).
wanted=(
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev
  libgloo-dev libgtest-dev libgmock-dev
  libdw-dev  # symbolizes the thread stacks of a hung worker (the build falls back to dladdr without it)
  libssl-dev zlib1g-dev  # gRPC's CMake package looks for OpenSSL and ZLIB
)
# Any machine that runs a compiler has these; carrying them would only risk
# shadowing the machine's own C library and loader.
base='^(adduser|cdebconf|debconf|dpkg|tar|passwd|install-info|readline-common|gcc-[0-9]+-base|'\
'libc6|libc6-dev|libc-dev-bin|linux-libc-dev|libgcc-s1|libstdc\+\+6|libcrypt1|libcrypt-dev|'\
'libaudit1|libaudit-common|libcap-ng0|libselinux1|libsemanage2|libsemanage-common|libsepol2|'\
'libpam0g|libpam-modules|libpcre2-8-0|libbz2-1.0|libtinfo6|libreadline8|libslang2|libnewt0.52|'\
'libtextwrap1|libdebian-installer4|libcom-err2|libgssapi-krb5-2|libk5crypto3|libkeyutils1|'\
'libkrb5-3|libkrb5support0|libnsl2|libnsl-dev|libtirpc3|libtirpc-dev|libtirpc-common|'\
'rpcsvc-proto|zlib1g|pkgconf|pkgconf-bin|libpkgconf3|catch2)$'

mapfile -t packages < <(
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances "${wanted[@]}" 2>/dev/null |
    grep -v '^[ <]' | sort -u | grep -Ev "$base")
((${#packages[@]} > 0)) || { echo "fetch_deps: apt-cache found nothing (is this a Debian machine?)" >&2; exit 1; }

download=$(mktemp -d)
trap 'rm -rf "$download"' EXIT
echo "fetch_deps: downloading ${#packages[@]} packages"
(cd "$download" && apt-get download -qq "${packages[@]}")

rm -rf "$deps"
mkdir -p "$deps"
for deb in "$download"/*.deb; do dpkg -x "$deb" "$deps"; done
rm -rf "$deps/usr/share/doc" "$deps/usr/share/man" "$deps/usr/share/info" "$deps/usr/share/lintian" \
       "$deps/usr/src"  # GoogleTest's sources: its built archives are there
# The build links the shared libraries; static archives are most of the bytes.
# GoogleTest and GoogleMock ship only as archives, so theirs stay.
find "$deps" -name '*.a' ! -name 'libgtest*.a' ! -name 'libgmock*.a' -delete

# The pieces run_gpu_checks.sh's CMake configure and code generation reach for.
missing=0
for need in usr/bin/protoc usr/bin/grpc_cpp_plugin usr/include/grpcpp/grpcpp.h \
            usr/include/gloo/allreduce.h usr/include/spdlog/spdlog.h usr/include/CLI/CLI.hpp \
            usr/include/nlohmann/json.hpp usr/include/gtest/gtest.h; do
  [[ -e "$deps/$need" ]] || { echo "fetch_deps: missing $need" >&2; missing=1; }
done
for pattern in 'gRPCConfig.cmake' 'libgloo.so*' 'libspdlog.so*' 'libprotobuf.so*'; do
  [[ -n "$(find "$deps/usr" -name "$pattern" -print -quit)" ]] ||
    { echo "fetch_deps: missing $pattern" >&2; missing=1; }
done

size_mb=$(du -sm --apparent-size "$deps" | cut -f1)  # bytes carried, not disk blocks
echo "fetch_deps: $deps: ${size_mb} MiB from ${#packages[@]} packages"
if ((size_mb > limit_mb)); then
  echo "fetch_deps: over the ${limit_mb} MiB a device call can carry" >&2
  exit 1
fi
exit "$missing"
