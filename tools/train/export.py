#!/usr/bin/python3
"""Export a training checkpoint for tools/mkpack.py.

  export.py CKPT.pt OUTDIR     writes OUTDIR/config.json (Hugging Face config)
                               and OUTDIR/weights.npz (float32, Hugging Face
                               names, torch [out, in] convention)

Then: tools/mkpack.py --config OUTDIR/config.json --weights OUTDIR/weights.npz
      --tokenizer-dir TOKDIR --out PACK --style cpu --accuracy-level 0
"""
import json
import os
import sys

import numpy as np
import torch


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    ck = torch.load(sys.argv[1], map_location="cpu")
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    cfg = dict(ck["config"])
    W = {k: v.detach().float().numpy() for k, v in ck["state"].items()}
    if cfg["tie_word_embeddings"]:
        W.pop("lm_head.weight", None)
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=1)
    np.savez(os.path.join(out, "weights.npz"), **W)
    print(f"export: step {ck['step']}, {ck['tokens']} tokens, {len(W)} arrays -> {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
