#!/usr/bin/env bash
# llama-cpp.sh - build llama.cpp (a benchmark peer and an independent oracle) under .cache/llama/,
# from source obtained through the npm registry: node-llama-cpp@3.22.1 ships llama.cpp release v0.5.0
# as a git bundle (package/llama/gitRelease.bundle). Nothing of llama.cpp is committed to ogakit.
#
#   tools/llama-cpp.sh [noamx|native|oracle]   build (once; cached) and print the directory holding
#                                        the programs: llama-server, llama-cli, llama-bench, llama-quantize,
#                                        llama-tokenize (noamx, native); llama-oracle (oracle)
#   tools/llama-cpp.sh --check [noamx|native|oracle]   print the directory if already built, else exit 4
#
# Builds:
#   noamx  (default) -march=native minus AMX (-mno-amx-tile -mno-amx-int8 -mno-amx-bf16): what the
#          tests use, and what CPUs without AMX (AMD Zen) run. On an AMD CPU it is the native build.
#   oracle noamx's flags at -O1 instead of -O3, and only llama.cpp's libraries (libllama, ggml), linked
#          into t/llama-oracle.c (test code on llama.h: greedy ids with logit gaps, tokenize): t/gguf.bats's
#          oracle, built by tools/deps.sh in a third of the time the -O3 llama-server took (its server,
#          common library and multimodal tools were two thirds of the compile); never a benchmark peer.
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
check=0
while [ "$#" -gt 0 ]; do
  case "$1" in
    --check) check=1; shift ;;
    *) break ;;
  esac
done
kind=${1:-noamx}
case "$kind" in
  noamx|native|oracle) ;;
  -h|--help) sed -n '2,23s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
  *) echo "llama-cpp.sh: unknown build '$kind' (noamx|native|oracle)" >&2; exit 2 ;;
esac
out=$root/build-$kind
bins=(llama-server llama-cli llama-bench llama-quantize llama-tokenize)
[ "$kind" = oracle ] && bins=(llama-oracle)
built() {
  local b
  for b in "${bins[@]}"; do [ -x "$out/bin/$b" ] || return 1; done
  # the oracle's driver is ogakit's test code: rebuilt when it changes
  [ "$kind" != oracle ] || [ "$out/bin/llama-oracle" -nt "$top/t/llama-oracle.c" ]
}
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
[ "$kind" = oracle ] && opt=(-DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG"
  -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF)
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
  if [ "$kind" = oracle ]; then
    # the libraries only, then the test driver compiled and linked against them (the link line is the one
    # llama.cpp's own programs use: its static libraries, OpenMP, libdl)
    cmake --build "$out" -j "$(nproc)" --target llama &&
      mkdir -p "$out/bin" &&
      gcc -std=gnu11 -O1 -Wall -Wextra -I"$root/src/include" -I"$root/src/ggml/include" -c \
        "$top/t/llama-oracle.c" -o "$out/llama-oracle.o" &&
      g++ -o "$out/bin/llama-oracle.tmp" "$out/llama-oracle.o" "$out/src/libllama.a" "$out/ggml/src/libggml.a" \
        "$out/ggml/src/libggml-cpu.a" "$out/ggml/src/libggml-base.a" -fopenmp -pthread -ldl -lm &&
      mv "$out/bin/llama-oracle.tmp" "$out/bin/llama-oracle"
  else
    cmake --build "$out" -j "$(nproc)" --target "${bins[@]}"
  fi
} >>"$log" 2>&1 || fail "building llama.cpp ($kind) failed"
built || fail "the build finished without ${bins[*]}"
echo "$out/bin"
