#!/usr/bin/python3
"""gguf-oracle.py - llama.cpp as an independent oracle for a GGUF written by q4nx-gguf.

  gguf-oracle.py greedy BINDIR MODEL.gguf MODEL.q4nx PROMPT_IDS.json N [TIE]
      llama.cpp's greedy continuation (BINDIR/llama-oracle greedy: argmax of its logits, and the
      top-1/top-2 logit gap at each step) against
      `npu-forward run --mode f32`'s for N tokens. Where they first differ, the step is a near-tie
      when llama.cpp's token is npu-forward's second choice and either side's top-1/top-2 gap
      (log-probabilities, = logit gap) is below TIE (default 0.05; see TIE_Q): named on stdout,
      not failed. Exit 0 same (or near-tie), 1 a real divergence.
  gguf-oracle.py tokenize BINDIR MODEL.gguf MODEL.q4nx [--plain] FILE...
      llama.cpp's llama_tokenize (add_special false, specials parsed, as llama-server's /tokenize)
      against `npu-forward tokenize --no-special` for each file, and for the first line of each with
      specials (not with --plain). Exit 0 identical, 1 a difference.

BINDIR holds llama-oracle (t/llama-oracle.c on llama.cpp's library; tools/llama-cpp.sh oracle builds it).
Each call is bounded in time. Prints one line per check.
"""
import json
import os
import signal
import subprocess
import sys

# logit gap below which the argmax is a near-tie. F32 weights: llama.cpp computes in fp32 like
# npu-forward --mode f32, only the accumulation order differs. Q4_0/Q4_1/Q8_0 weights: llama.cpp
# quantises the activations to 8 bits per block of 32 (its vec_dot pairs them with Q8_0/Q8_1), which
# moves logits of these tiny random models by ~0.1 (as npu-forward --mode i8 does): the caller passes
# a larger bound (TIE_Q) for those.
TIE = 0.05
TIE_Q = 0.5


def oracle(bindir, *args):
    """t/llama-oracle.c (llama.cpp's library) with ARGS; its stdout. Bounded in time."""
    try:
        r = subprocess.run([os.path.join(bindir, "llama-oracle")] + [str(a) for a in args], capture_output=True,
                           timeout=300)
    except subprocess.TimeoutExpired:
        raise SystemExit("gguf-oracle: llama-oracle %s: no answer in 300 s" % args[0])
    if r.returncode:
        raise SystemExit("gguf-oracle: llama-oracle %s %s: exit %d: %s (LLAMA_ORACLE_LOG=1 shows llama.cpp's log)"
                         % (args[0], args[1], r.returncode, r.stderr.decode(errors="replace").strip()))
    return r.stdout.decode()


def run(cmd):
    r = subprocess.run(cmd, capture_output=True)
    if r.returncode:
        raise SystemExit("gguf-oracle: %s: exit %d: %s" % (cmd[0], r.returncode, r.stderr.decode(errors="replace")))
    return r.stdout


def ours_gap(q4nx, ids):
    """npu-forward's top-1/top-2 logit gap after the prefix ids (teacher forcing, last position)."""
    path = os.path.join(os.environ.get("BATS_TEST_TMPDIR", "/tmp"), "oracle-prefix.%d.json" % os.getpid())
    with open(path, "w") as f:
        json.dump(ids, f)
    out = json.loads(run(["npu-forward", "logits", "-m", q4nx, "--ids", path, "--topk", "2", "--mode", "f32"]))
    os.unlink(path)
    last = out["topk"][-1]
    vals = sorted(last["logits"], reverse=True)
    return vals[0] - vals[1], last["ids"][:2]


def greedy(bindir, gguf, q4nx, prompt_path, n, tie):
    prompt = json.load(open(prompt_path))
    ours = json.loads(run(["npu-forward", "run", "-m", q4nx, "--ids", prompt_path, "-n", str(n), "--ignore-eos",
                           "--json", "--mode", "f32", "-t", "2"]))["ids"]
    steps = [line.split() for line in oracle(bindir, "greedy", gguf, n, prompt_path).splitlines()]
    theirs = [int(t[0]) for t in steps]
    gaps = [float(t[1]) for t in steps]
    name = os.path.basename(gguf)
    for i in range(min(len(ours), len(theirs), n)):
        if ours[i] != theirs[i]:
            gap_l = gaps[i]
            gap_o, top_o = ours_gap(q4nx, prompt + ours[:i])
            # a near-tie: the two candidates are each side's top two, and one side's gap is below the bound
            if min(gap_l, gap_o) < tie and theirs[i] in top_o:
                print("%s: near-tie at token %d: npu-forward %d, llama.cpp %d (top-1/top-2 gap %.4g ours, %.4g "
                      "llama.cpp, < %g); %d tokens agreed before it" % (name, i, ours[i], theirs[i], gap_o, gap_l, tie, i))
                return 0
            print("%s: DIVERGED at token %d: npu-forward %d, llama.cpp %d (gap %.4g ours, %.4g llama.cpp)\n  ours   %s\n"
                  "  theirs %s" % (name, i, ours[i], theirs[i], gap_o, gap_l, ours, theirs))
            return 1
    if len(theirs) < n or len(ours) < n:
        print("%s: short output: ours %d, llama.cpp %d tokens of %d" % (name, len(ours), len(theirs), n))
        return 1
    print("%s: %d greedy tokens identical" % (name, n))
    return 0


def tokenize(bindir, gguf, q4nx, files, plain=False):
    """each file whole without specials, and its first line with them (not plain): one llama-oracle and one
    npu-forward tokenize --jsonl call for each of the two"""
    bad = 0
    tmpdir = os.path.join(os.environ.get("BATS_TEST_TMPDIR", "/tmp"), "oracle-text.%d" % os.getpid())
    os.makedirs(tmpdir, exist_ok=True)
    try:
        texts = [open(p, encoding="utf-8").read() for p in files]
        for add_special in (False,) if plain else (False, True):
            ts = [(t.split("\n", 1)[0] or "hello") if add_special else t for t in texts]
            paths = []
            for i, t in enumerate(ts):
                paths.append(os.path.join(tmpdir, "%d.txt" % i))
                with open(paths[-1], "w", encoding="utf-8") as f:
                    f.write(t)
            theirs_all = [[int(x) for x in line.split()]
                          for line in oracle(bindir, "tokenize", gguf, int(add_special), *paths).split("\n")[:len(ts)]]
            cmd = ["npu-forward", "tokenize", "-m", q4nx, "--jsonl"] + ([] if add_special else ["--no-special"])
            jl = "".join(json.dumps(t) + "\n" for t in ts).encode()
            ours_all = [json.loads(line) for line in
                        subprocess.run(cmd, input=jl, capture_output=True, check=True).stdout.decode().splitlines()]
            if len(ours_all) != len(ts) or len(theirs_all) != len(ts):
                print("%s: %d texts, %d answers from npu-forward, %d from llama.cpp" % (
                    os.path.basename(gguf), len(ts), len(ours_all), len(theirs_all)))
                return 1
            for path, ours, theirs in zip(files, ours_all, theirs_all):
                what = "%s: %s%s" % (os.path.basename(gguf), os.path.basename(path),
                                     " (first line, specials)" if add_special else "")
                if ours != theirs:
                    j = next((i for i in range(min(len(ours), len(theirs))) if ours[i] != theirs[i]),
                             min(len(ours), len(theirs)))
                    print("%s: ids differ at %d of %d/%d: ours %s, llama.cpp %s" % (
                        what, j, len(ours), len(theirs), ours[max(0, j - 2):j + 4], theirs[max(0, j - 2):j + 4]))
                    bad = 1
                else:
                    print("%s: %d ids identical" % (what, len(ours)))
    finally:
        for f in os.listdir(tmpdir):
            os.unlink(os.path.join(tmpdir, f))
        os.rmdir(tmpdir)
    return bad


def main():
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    if len(sys.argv) >= 7 and sys.argv[1] == "greedy":
        return greedy(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]),
                      float(sys.argv[7]) if len(sys.argv) > 7 else TIE)
    if len(sys.argv) >= 6 and sys.argv[1] == "tokenize":
        plain = sys.argv[5] == "--plain"
        return tokenize(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5 + plain:], plain)
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
