#!/bin/sh
# tools/train/run.sh - the whole route from the Python standard library to the two
# committed packs share/models/pytiny-target and share/models/pytiny-draft, and the
# numbers in share/models/README.md. Run once (as root for deps.sh) from the repo top:
#   sh tools/train/deps.sh && sh tools/train/run.sh [BUDGET_MINUTES]
# Work files go to .cache/train/. Training runs under nice -n 19 with 1 thread (see train.py).
set -eu
cd "$(dirname "$0")/../.."
W=.cache/train
PY=/usr/bin/python3
BUDGET=${1:-70}
mkdir -p $W
$PY tools/train/corpus.py && $PY tools/train/corpus.py --manifest > share/models/corpus-manifest.tsv
$PY tools/train/bpe.py train $W/tok
$PY tools/train/bpe.py encode $W/tok $W/data
$PY tools/train/bpe.py dump $W/tok $W/tokdump.json
node tools/train/tokcheck.mjs $W/tok $W/tokdump.json
OMP_WAIT_POLICY=PASSIVE nice -n 19 $PY tools/train/train.py $W/data $W/run --budget-min "$BUDGET"
for m in target draft; do
	$PY tools/train/export.py $W/run/$m.pt $W/export-$m
	$PY tools/mkpack.py --config $W/export-$m/config.json --weights $W/export-$m/weights.npz \
		--tokenizer-dir $W/tok --out share/models/pytiny-$m --style cpu --accuracy-level 0
	nice -n 19 $PY tools/train/packeval.py $W/run/$m.pt share/models/pytiny-$m $W/data/held.npy
done
node tools/train/continue.js share/models/pytiny-target -n 64 'def fibonacci(n):\n' 'class Stack:\n' \
	'import os\nimport sys\n\n' 'def fibonacci(n):\n    if n < 2:\n        return n\n' 'class Stack:\n    def __init__(self):\n'
node tools/train/continue.js share/models/pytiny-target -n 48 \
	'def fibonacci(n):' 'class Stack:' 'import os\n' 'def read_lines(path):' 'for i in range('
nice -n 19 node tools/train/accept.js share/models/pytiny-target share/models/pytiny-draft share/models/corpus-manifest.tsv --k 4
