#!/usr/bin/python3
"""Train the target and the drafter together, on the same batches.

  train.py DATADIR OUTDIR [--budget-min 65] [--steps N] [--batch 16] [--seq 256]

One thread by default: on a shared, oversubscribed 2-core machine torch's
2-thread OpenMP regions spin at their barriers while a sibling thread is
descheduled (measured: one target step 18-25 s wall with 2 threads against
2.8 s with 1, at load ~8 under nice -n 19).

Matrix products run in bfloat16 under torch.autocast (weights, optimizer state
and losses stay float32): about twice as fast on AVX-512 BF16 CPUs. Held-out
losses are computed in float32.

DATADIR holds train.npy / held.npy from bpe.py encode. Every step draws one
batch of random windows (seeded) and takes one AdamW step on each model. The
target's loss is cross-entropy; the drafter's is 0.5 * cross-entropy + 0.5 *
KL(target || drafter) on the same batch (the target's logits are detached), so
the drafter learns to predict what the target predicts — what speculative
decoding rewards.

Budget: with --steps N the LR schedule (linear warmup over 30 steps, cosine to
10 %) runs over N steps (reproducible). Without it the schedule runs over wall
time: its progress is elapsed / --budget-min, and training stops when the
budget is used up. The machine is shared, so a step-count budget measured at
the start would over- or under-run; the step count reached is in the log.

Writes OUTDIR/log.tsv (step, tokens, train losses, held-out losses, seconds),
OUTDIR/{target,draft}.pt checkpoints every 100 steps and at the end, and
OUTDIR/summary.json.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as M  # noqa: E402


def save_atomic(obj, path):
    tmp = path + ".tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)


@torch.no_grad()
def held_loss(net, held, seq, max_windows=None):
    net.eval()
    n = (len(held) - 1) // seq
    if max_windows:
        n = min(n, max_windows)
    tot, cnt = 0.0, 0
    for s in range(0, n, 16):
        idx = [torch.from_numpy(held[w * seq:w * seq + seq + 1].astype(np.int64)) for w in range(s, min(n, s + 16))]
        b = torch.stack(idx)
        lg = net(b[:, :-1])
        tot += F.cross_entropy(lg.reshape(-1, lg.shape[-1]), b[:, 1:].reshape(-1), reduction="sum").item()
        cnt += b[:, 1:].numel()
    net.train()
    return tot / cnt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--budget-min", type=float, default=65.0)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    os.makedirs(a.out, exist_ok=True)
    train = np.load(os.path.join(a.data, "train.npy"))
    held = np.load(os.path.join(a.data, "held.npy"))

    nets = {"target": M.CausalLM(M.hf_config(M.TARGET)), "draft": M.CausalLM(M.hf_config(M.DRAFT))}
    lrs = {"target": 2e-3, "draft": 3e-3}
    opts = {}
    for k, net in nets.items():
        decay = [p for n, p in net.named_parameters() if p.dim() == 2]
        other = [p for n, p in net.named_parameters() if p.dim() < 2]
        opts[k] = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                     {"params": other, "weight_decay": 0.0}],
                                    lr=lrs[k], betas=(0.9, 0.95), eps=1e-8)
        nparam = sum(p.numel() for p in net.parameters())
        print(f"train: {k}: {nparam} parameters", file=sys.stderr, flush=True)
        with open(os.path.join(a.out, k + ".config.json"), "w") as fh:
            json.dump(net.c, fh, indent=1)

    warm = 30
    budget = a.budget_min * 60
    log = open(os.path.join(a.out, "log.tsv"), "w")
    log.write("step\ttokens\ttarget_train\tdraft_train\ttarget_held\tdraft_held\tseconds\n")
    t0 = time.time()
    tok = 0
    run = {"target": 0.0, "draft": 0.0}
    nrun = 0
    step = 0

    def checkpoint(final=False):
        for k, net in nets.items():
            save_atomic({"config": net.c, "state": net.state_dict(), "step": step, "tokens": tok},
                        os.path.join(a.out, k + ".pt"))

    while True:
        if a.steps:
            if step >= a.steps:
                break
            frac = max(0.0, (step - warm) / max(1, a.steps - warm))
        else:
            frac = (time.time() - t0) / budget
            if frac >= 1.0:
                break
        scale = (step + 1) / warm if step < warm else 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))
        starts = rng.integers(0, len(train) - a.seq - 1, a.batch)
        b = torch.from_numpy(np.stack([train[s:s + a.seq + 1] for s in starts]).astype(np.int64))
        x, y = b[:, :-1], b[:, 1:].reshape(-1)

        with torch.autocast("cpu", dtype=torch.bfloat16):
            lt = nets["target"](x)
        lt = lt.float().reshape(-1, 4096)
        loss_t = F.cross_entropy(lt, y)
        opts["target"].zero_grad(set_to_none=True)
        loss_t.backward()
        torch.nn.utils.clip_grad_norm_(nets["target"].parameters(), 1.0)

        with torch.autocast("cpu", dtype=torch.bfloat16):
            ld = nets["draft"](x)
        ld = ld.float().reshape(-1, 4096)
        ce_d = F.cross_entropy(ld, y)
        kl = F.kl_div(F.log_softmax(ld, -1), F.log_softmax(lt.detach(), -1), log_target=True, reduction="batchmean")
        loss_d = 0.5 * ce_d + 0.5 * kl
        opts["draft"].zero_grad(set_to_none=True)
        loss_d.backward()
        torch.nn.utils.clip_grad_norm_(nets["draft"].parameters(), 1.0)

        for k in nets:
            for g in opts[k].param_groups:
                g["lr"] = lrs[k] * scale
            opts[k].step()
        step += 1
        tok += x.numel()
        run["target"] += loss_t.item()
        run["draft"] += ce_d.item()
        nrun += 1

        eval_now = step % 200 == 0
        if step % 10 == 0 or eval_now:
            ht = hd = float("nan")
            if eval_now:
                ht = held_loss(nets["target"], held, a.seq, 32)
                hd = held_loss(nets["draft"], held, a.seq, 32)
            log.write(f"{step}\t{tok}\t{run['target'] / nrun:.4f}\t{run['draft'] / nrun:.4f}\t{ht:.4f}\t{hd:.4f}\t{time.time() - t0:.0f}\n")
            log.flush()
            run = {"target": 0.0, "draft": 0.0}
            nrun = 0
        if step % 100 == 0:
            checkpoint()
    checkpoint(final=True)
    wall = time.time() - t0
    summ = {"steps": step, "tokens": tok, "train_seconds": round(wall),
            "batch": a.batch, "seq": a.seq, "threads": a.threads, "seed": a.seed}
    for k, net in nets.items():
        summ[k + "_params"] = sum(p.numel() for p in net.parameters())
        summ[k + "_held_loss"] = round(held_loss(net, held, a.seq), 4)
    summ["held_tokens"] = int(((len(held) - 1) // a.seq) * a.seq)
    summ["total_seconds"] = round(time.time() - t0)
    with open(os.path.join(a.out, "summary.json"), "w") as fh:
        json.dump(summ, fh, indent=1)
    print(json.dumps(summ), file=sys.stderr)


if __name__ == "__main__":
    main()
