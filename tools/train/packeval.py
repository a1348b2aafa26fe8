#!/usr/bin/python3
"""Compare a checkpoint (torch, float32) with its int4 OGA pack (onnxruntime via
tools/ort-ref.js teacher) on held-out windows.

  packeval.py CKPT.pt PACK HELD.npy [--windows 8] [--seq 256]

Reports, over the same windows: cross-entropy of torch float32 and of the pack
(onnxruntime), top-1 agreement between the two, and the largest logit difference.
A wrong export (RoPE layout, q/k/v order, transposes) shows as agreement near 0
and a loss near ln(vocab); int4 quantisation as a small loss increase.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import model as M  # noqa: E402


def main():
    args = sys.argv[1:]
    opt = {"--windows": 8, "--seq": 256}
    for k in list(opt):
        if k in args:
            i = args.index(k)
            opt[k] = int(args[i + 1])
            del args[i:i + 2]
    if len(args) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    ck = torch.load(args[0], map_location="cpu")
    net = M.CausalLM(ck["config"])
    net.load_state_dict(ck["state"])
    net.eval()
    held = np.load(args[2]).astype(np.int64)
    seq, nw = opt["--seq"], opt["--windows"]
    stride = (len(held) - seq - 1) // nw
    V = ck["config"]["vocab_size"]
    tl = ol = 0.0
    agree = n = 0
    maxd = 0.0
    for w in range(nw):
        ids = held[w * stride:w * stride + seq + 1]
        x, y = ids[:-1], torch.from_numpy(ids[1:])
        with torch.no_grad():
            lt = net(torch.from_numpy(x)[None])[0]
        with tempfile.TemporaryDirectory() as td:
            f = os.path.join(td, "l.f32")
            subprocess.run(["node", os.path.join(TOP, "tools/ort-ref.js"), args[1], "teacher",
                            "--ids", json.dumps(x.tolist()), "--logits-f32", f],
                           check=True, stdout=subprocess.DEVNULL)
            lo = torch.from_numpy(np.fromfile(f, np.float32).reshape(seq, V))
        tl += F.cross_entropy(lt, y, reduction="sum").item()
        ol += F.cross_entropy(lo, y, reduction="sum").item()
        agree += (lt.argmax(-1) == lo.argmax(-1)).sum().item()
        n += seq
        maxd = max(maxd, (lt - lo).abs().max().item())
    res = {"windows": nw, "tokens": n, "torch_f32_loss": round(tl / n, 4), "pack_int4_loss": round(ol / n, 4),
           "top1_agreement": round(agree / n, 4), "max_abs_logit_diff": round(maxd, 4)}
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
