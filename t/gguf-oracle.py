#!/usr/bin/python3
"""gguf-oracle.py - llama.cpp as an independent oracle for a GGUF written by q4nx-gguf.

  gguf-oracle.py greedy BINDIR MODEL.gguf MODEL.q4nx PROMPT_IDS.json N [TIE]
      llama-server's greedy continuation (POST /completion, temperature 0, n_probs 2) against
      `npu-forward run --mode f32`'s for N tokens. Where they first differ, the step is a near-tie
      when llama.cpp's token is npu-forward's second choice and either side's top-1/top-2 gap
      (log-probabilities, = logit gap) is below TIE (default 0.05; see TIE_Q): named on stdout,
      not failed. Exit 0 same (or near-tie), 1 a real divergence.
  gguf-oracle.py tokenize BINDIR MODEL.gguf MODEL.q4nx FILE...
      llama-server's /tokenize (add_special false) against `npu-forward tokenize --no-special` for
      each file, and for the first line of each with specials. Exit 0 identical, 1 a difference.

The server listens on 127.0.0.1 on a free port, is bounded in time, and is always killed (finally,
and on SIGTERM/SIGINT). Prints one line per check.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

# logit gap below which the argmax is a near-tie. F32 weights: llama.cpp computes in fp32 like
# npu-forward --mode f32, only the accumulation order differs. Q4_0/Q4_1/Q8_0 weights: llama.cpp
# quantises the activations to 8 bits per block of 32 (its vec_dot pairs them with Q8_0/Q8_1), which
# moves logits of these tiny random models by ~0.1 (as npu-forward --mode i8 does): the caller passes
# a larger bound (TIE_Q) for those.
TIE = 0.05
TIE_Q = 0.5


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Server:
    def __init__(self, bindir, gguf):
        self.port = free_port()
        self.log = open(os.environ.get("GGUF_ORACLE_LOG", "/dev/null"), "wb")
        self.p = subprocess.Popen(
            [os.path.join(bindir, "llama-server"), "-m", gguf, "--host", "127.0.0.1", "--port", str(self.port),
             "-c", "1024", "-t", "2", "-np", "1", "--no-warmup"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 120
        while True:
            if self.p.poll() is not None:
                raise SystemExit("gguf-oracle: llama-server exited with %d while loading %s (set GGUF_ORACLE_LOG)"
                                 % (self.p.returncode, gguf))
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/health" % self.port, timeout=2) as r:
                    if r.status == 200:
                        return
            except Exception:
                pass
            if time.time() > deadline:
                raise SystemExit("gguf-oracle: llama-server not healthy after 120 s")
            time.sleep(0.2)

    def post(self, path, body):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path), data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read())

    def close(self):
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()
        self.log.close()


def run(cmd):
    r = subprocess.run(cmd, capture_output=True)
    if r.returncode:
        raise SystemExit("gguf-oracle: %s: exit %d: %s" % (cmd[0], r.returncode, r.stderr.decode(errors="replace")))
    return r.stdout


def top2(step):
    """(id1, gap) from one /completion probability entry (either server format)."""
    tops = step.get("top_logprobs") or step.get("top_probs") or step.get("probs") or []
    vals = []
    for t in tops:
        if "logprob" in t:
            vals.append((t["id"], t["logprob"]))
        else:
            import math
            vals.append((t.get("id"), math.log(max(t.get("prob", 0), 1e-30))))
    vals.sort(key=lambda v: -v[1])
    if len(vals) < 2:
        return (vals[0][0] if vals else None), float("inf")
    return vals[0][0], vals[0][1] - vals[1][1]


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
    srv = Server(bindir, gguf)
    try:
        r = srv.post("/completion", {"prompt": prompt, "n_predict": n, "temperature": 0, "top_k": 1, "n_probs": 2,
                                     "return_tokens": True, "cache_prompt": False, "ignore_eos": True,
                                     "samplers": ["top_k"]})
    finally:
        srv.close()
    theirs = r.get("tokens") or []
    probs = r.get("completion_probabilities") or []
    name = os.path.basename(gguf)
    for i in range(min(len(ours), len(theirs), n)):
        if ours[i] != theirs[i]:
            gap_l = top2(probs[i])[1] if i < len(probs) else float("inf")
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


def tokenize(bindir, gguf, q4nx, files):
    srv = Server(bindir, gguf)
    bad = 0
    try:
        for path in files:
            text = open(path, encoding="utf-8").read()
            first = text.split("\n", 1)[0] or "hello"
            for add_special, t in ((False, text), (True, first)):
                theirs = srv.post("/tokenize", {"content": t, "add_special": add_special})["tokens"]
                cmd = ["npu-forward", "tokenize", "-m", q4nx] + ([] if add_special else ["--no-special"])
                ours = json.loads(subprocess.run(cmd, input=t.encode(), capture_output=True, check=True).stdout)
                if ours != theirs:
                    j = next((i for i in range(min(len(ours), len(theirs))) if ours[i] != theirs[i]),
                             min(len(ours), len(theirs)))
                    print("%s: %s%s: ids differ at %d of %d/%d: ours %s, llama.cpp %s" % (
                        os.path.basename(gguf), os.path.basename(path), " (first line, specials)" if add_special else "",
                        j, len(ours), len(theirs), ours[max(0, j - 2):j + 4], theirs[max(0, j - 2):j + 4]))
                    bad = 1
                else:
                    print("%s: %s%s: %d ids identical" % (os.path.basename(gguf), os.path.basename(path),
                                                          " (first line, specials)" if add_special else "", len(ours)))
    finally:
        srv.close()
    return bad


def main():
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    if len(sys.argv) >= 7 and sys.argv[1] == "greedy":
        return greedy(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]),
                      float(sys.argv[7]) if len(sys.argv) > 7 else TIE)
    if len(sys.argv) >= 6 and sys.argv[1] == "tokenize":
        return tokenize(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
