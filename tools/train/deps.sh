#!/bin/sh
# Training-only dependencies for tools/train (NOT part of tools/deps.sh: CI never
# trains; the trained packs under share/models/ are committed).
#   python3-torch          Debian bookworm's torch 1.13 (CPU)
#   libopenblas0-pthread   without it torch falls back to the reference BLAS (~50x slower)
#   python3-regex          \p{L}/\p{N} in the BPE pre-tokeniser regex
#   python3-numpy, python3-onnx   export through tools/mkpack.py
set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends python3-torch libopenblas0-pthread python3-regex python3-numpy python3-onnx
