#!/usr/bin/env bash
# llama-cpp.sh - build llama.cpp (a benchmark peer and an independent oracle) under .cache/llama/,
# from source obtained through the npm registry: node-llama-cpp@3.22.1 ships llama.cpp release v0.5.0
# as a git bundle (package/llama/gitRelease.bundle). Nothing of llama.cpp is committed to ogakit.
#
#   tools/llama-cpp.sh [noamx|native|oracle]   build (once; cached) and print the directory holding
#                                        llama-server, llama-cli, llama-bench, llama-quantize, llama-tokenize
#   tools/llama-cpp.sh --check [noamx|native|oracle]   print the directory if already built, else exit 4
#   --server-only (with either): only llama-server, what the tests need (tools/deps.sh builds just it;
#                 a later build without the option adds the other programs to the same build tree)
#
# Builds:
#   noamx  (default) -march=native minus AMX (-mno-amx-tile -mno-amx-int8 -mno-amx-bf16): what the
#          tests use, and what CPUs without AMX (AMD Zen) run. On an AMD CPU it is the native build.
#   oracle noamx's flags at -O1 instead of -O3: t/gguf.bats's oracle (tools/deps.sh builds it), in two
#          thirds of the time (server only, 2 cores: 288 s against 426 s); never a benchmark peer.
#   native -march=native with AMX where the CPU has it. GCC 12's _tile_loadconfig intrinsic declares an
#          8-byte operand for the 64-byte tile config, so the optimiser may drop the stores that fill it
#          (SIGILL at the first tile load); this build force-includes tools/llama-amx-fix.h, which
#          replaces the intrinsic with an ldtilecfg whose memory operand covers all 64 bytes.
# CPU only, no network at configure time. Takes ~5-8 minutes on 2 cores. Output of the build goes to
# .cache/llama/build-<kind>.log. Exit status: 0 ok, 2 usage, 4 the build failed (see the log).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(dirname "$here")
root=$top/.cache/llama
version=3.22.1
check=0 server_only=0
while [ "$#" -gt 0 ]; do
  case "$1" in
    --check) check=1; shift ;;
    --server-only) server_only=1; shift ;;
    *) break ;;
  esac
done
kind=${1:-noamx}
case "$kind" in
  noamx|native|oracle) ;;
  -h|--help) sed -n '2,21s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
  *) echo "llama-cpp.sh: unknown build '$kind' (noamx|native|oracle)" >&2; exit 2 ;;
esac
out=$root/build-$kind
bins=(llama-server llama-cli llama-bench llama-quantize llama-tokenize)
[ "$server_only" = 1 ] && bins=(llama-server)
built() { local b; for b in "${bins[@]}"; do [ -x "$out/bin/$b" ] || return 1; done; }
if built; then echo "$out/bin"; exit 0; fi
[ "$check" = 0 ] || { echo "llama-cpp.sh: llama.cpp ($kind) is not built; run tools/llama-cpp.sh $kind" >&2; exit 4; }

mkdir -p "$root"
exec 9>"$root/.lock"
flock 9
if built; then echo "$out/bin"; exit 0; fi
log=$root/build-$kind.log
fail() { echo "llama-cpp.sh: $1 (log: $log)" >&2; exit 4; }
for t in cmake ninja g++ git; do command -v "$t" >/dev/null || fail "$t is not installed (tools/deps.sh installs it)"; done

if [ ! -f "$root/src/CMakeLists.txt" ]; then
  tmp=$(mktemp -d "$root/.fetch.XXXXXX")
  ( cd "$tmp" && npm pack "node-llama-cpp@$version" --silent >/dev/null \
      && tar xzf "node-llama-cpp-$version.tgz" package/llama/gitRelease.bundle \
      && git clone -q package/llama/gitRelease.bundle src ) >"$log" 2>&1 || { rm -rf "$tmp"; fail "fetching node-llama-cpp@$version failed"; }
  rm -rf "$root/src"
  mv "$tmp/src" "$root/src"
  rm -rf "$tmp"
fi

flags="-march=native"
[ "$kind" != native ] && flags="$flags -mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
opt=()
[ "$kind" = oracle ] && opt=(-DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG")
[ "$kind" = native ] && flags="$flags -include $here/llama-amx-fix.h"
{
  # a configured tree of this kind is reused: only the missing programs are built
  if [ ! -f "$out/build.ninja" ]; then
    rm -rf "$out"
    cmake -S "$root/src" -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF "${opt[@]}" \
      -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
      -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF
  fi &&
  cmake --build "$out" -j "$(nproc)" --target "${bins[@]}"
} >>"$log" 2>&1 || fail "building llama.cpp ($kind) failed"
built || fail "the build finished without ${bins[*]}"
echo "$out/bin"
