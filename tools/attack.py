#!/usr/bin/python3
"""attack.py - a hostile-input campaign against the ogakit programs (issue 12's classes of attack).

  tools/attack.py [-b BUILD] [-s SCALE] [--seed N] [--class NAME,...] [-o REPORT.jsonl] [-k]

Runs cases of each class against the programs of BUILD (default: build; build/san for the
sanitizer build) and counts what came back. A case FAILS the campaign when a program
  crashed     died of a signal, or printed a sanitizer report (AddressSanitizer, LeakSanitizer,
              UBSan "runtime error:") whatever its exit code
  hung        ran past its time limit (killed)
  memory      peaked over 4 GiB
  coded wrong exited with a code its man page does not list, or failed without a word on stderr
  left files  left anything beside the final output (temp files) after a refusal or a kill -9
  disagreed   one gate accepted the input and a later one refused it (oga-info importable but
              extract/pack/run fails; q4nx-verify clean but npu-forward --verify refuses, or the
              other way round; q4nx-pack accepts a stream that then does not run)
Classes (cases at scale 1):
  container  byte flips (anywhere / in the index and metadata tail), truncations, zeroed runs and
             appended bytes of a container: q4nx-verify, npu-forward run --verify, npu-forward run  (400)
  stream     byte flips and truncations of an OGAX stream: q4nx-pack, then run what it accepts     (200)
  pack       pack-directory edits (config values, model.onnx bytes, data truncation, files removed
             or replaced by FIFOs/directories/dangling links): oga-info, then extract | pack | run (300)
  cli        hostile command lines for every program (numbers, paths, devices, FIFOs, options)      (300)
  template   chat-template bombs (deep nesting of every construct, render-budget bombs) through
             npu-forward chat --template; time and peak memory recorded                            (150)
  kill       kill -9 of q4nx-pack -o and oga-extract -o at a random moment: nothing but a whole
             output may remain                                                                     (40)
  disk       writers on a full tmpfs (needs root and mount; else skipped by name)                  (20)
Peak RSS is the largest ru_maxrss of a class's programs (a forked child counts from the launcher's own
size, about 80 MiB, so smaller peaks read as that). Prints one line per class and a total; -o writes every case as a JSON line. -k keeps the work dir.
Exit: 0 no case failed, 1 some case failed, 2 usage, 4 set-up failed (build or fixtures missing).
"""
import argparse
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAN_MARKS = (b"AddressSanitizer", b"LeakSanitizer", b"runtime error:", b"UndefinedBehaviorSanitizer")
CODES = {  # exit codes each program documents (its man page)
    "oga-info": {0, 2, 3},
    "oga-extract": {0, 1, 2, 3},
    "q4nx-pack": {0, 1, 2, 3},
    "q4nx-verify": {0, 1, 2, 3, 4},
    "q4nx-gguf": {0, 1, 2, 3, 4},
    "npu-forward": {0, 1, 2, 3, 4, 5},
    "npu-gemm": {0, 1, 2, 3, 4},
    "spec-replay": {0, 1, 2, 3, 4, 5},
}


class Campaign:
    def __init__(self, a):
        self.bin = os.path.join(os.path.abspath(a.build), "bin")
        self.rng = random.Random(a.seed)
        self.scale = a.scale
        self.work = tempfile.mkdtemp(prefix="ogk-attack-")
        self.report = open(a.output, "w") if a.output else None
        self.stats = {}
        self.failures = []
        # the programs pick their own kernel path (a forced OGAKIT_KERNEL of the caller is not inherited)
        self.env = {k: v for k, v in os.environ.items() if k != "OGAKIT_KERNEL"}
        self.env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0"

    def n(self, base):
        return max(1, int(base * self.scale))

    # run one program; returns (code, stderr bytes, stdout bytes, seconds, max rss MiB, flags)
    def run(self, argv, timeout=30, stdin=None, cwd=None):
        prog = os.path.basename(argv[0])
        argv = [os.path.join(self.bin, argv[0])] + list(argv[1:])
        out = tempfile.TemporaryFile(dir=self.work)
        err = tempfile.TemporaryFile(dir=self.work)
        fin = open(stdin, "rb") if stdin else subprocess.DEVNULL
        t0 = time.monotonic()
        p = subprocess.Popen(argv, stdin=fin, stdout=out, stderr=err, env=self.env, cwd=cwd, start_new_session=True)
        hung = False
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > timeout:
                os.killpg(p.pid, signal.SIGKILL)
                pid, status, ru = os.wait4(p.pid, 0)
                hung = True
                break
            time.sleep(0.005)
        p.returncode = 0  # reaped here; keep Popen from waiting again
        dt = time.monotonic() - t0
        if stdin:
            fin.close()
        out.seek(0), err.seek(0)
        o, e = out.read(), err.read()
        out.close(), err.close()
        if os.WIFSIGNALED(status):
            code = -os.WTERMSIG(status)
        else:
            code = os.WEXITSTATUS(status)
        flags = []
        if hung:
            flags.append("hung")
        elif code < 0 or code >= 128 or any(m in e for m in SAN_MARKS):
            flags.append("crashed")
        elif ru.ru_maxrss > (4 << 20):
            flags.append("memory over 4 GiB")
        elif code not in CODES.get(prog, {0, 1, 2, 3, 4, 5}):
            flags.append("coded wrong")
        elif code != 0 and not e.strip():
            flags.append("coded wrong (silent failure)")
        return code, e, o, dt, ru.ru_maxrss / 1024.0, flags

    def record(self, cls, case, steps, extra_flags=()):
        """steps: list of (name, result tuple); a case fails on any step's flags or extra_flags"""
        st = self.stats.setdefault(cls, {"cases": 0, "failed": 0, "codes": {}, "flags": {}, "max_s": 0.0, "max_rss_mb": 0.0})
        st["cases"] += 1
        flags = list(extra_flags)
        rec = {"class": cls, "case": case, "steps": []}
        for name, r in steps:
            code, e, _, dt, rss, fl = r
            key = "%s=%d" % (name, code)
            st["codes"][key] = st["codes"].get(key, 0) + 1
            st["max_s"] = max(st["max_s"], dt)
            st["max_rss_mb"] = max(st["max_rss_mb"], rss)
            flags += ["%s %s" % (name, f) for f in fl]
            rec["steps"].append({"step": name, "exit": code, "seconds": round(dt, 3), "rss_mb": round(rss, 1),
                                 "stderr": e.decode("utf-8", "replace").strip().splitlines()[-1:] if e.strip() else []})
        for f in flags:
            k = f.split(" ", 1)[1] if " " in f else f
            st["flags"][k] = st["flags"].get(k, 0) + 1
        rec["flags"] = flags
        if flags:
            st["failed"] += 1
            self.failures.append(rec)
        if self.report:
            self.report.write(json.dumps(rec) + "\n")
        return not flags

    def leftovers(self, d, keep=()):
        return sorted(x for x in os.listdir(d) if x not in keep)

    # ---- set-up: the fixture pack, its stream and container, the reference output ----
    def setup(self):
        for p in ("oga-info", "oga-extract", "q4nx-pack", "q4nx-verify", "npu-forward"):
            if not os.access(os.path.join(self.bin, p), os.X_OK):
                sys.stderr.write("attack.py: %s/%s not built (make, or make SAN=1 for build/san)\n" % (self.bin, p))
                sys.exit(4)
        r = subprocess.run([os.path.join(TOP, "tools/fixture.sh"), "qwen2", "cpu", "tied", "tiny"], capture_output=True, text=True)
        if r.returncode:
            sys.stderr.write(r.stderr)
            sys.exit(4)
        self.pack = r.stdout.strip()
        self.stream = os.path.join(self.work, "base.ogax")
        self.cont = os.path.join(self.work, "base.q4nx")
        for argv in (["oga-extract", "-o", self.stream, self.pack], ["q4nx-pack", "-o", self.cont]):
            r = self.run(argv, timeout=120, stdin=self.stream if argv[0] == "q4nx-pack" else None)
            if r[0] or r[5]:
                sys.stderr.write("attack.py: set-up step %s failed (exit %d): %s" % (argv[0], r[0], r[1].decode()))
                sys.exit(4)
        r = self.run(["npu-forward", "run", "-m", self.cont, "-p", "Hello", "-n", "3", "-t", "1"], timeout=60)
        if r[0]:
            sys.stderr.write("attack.py: the unmutated container does not run: " + r[1].decode())
            sys.exit(4)
        self.ref_out = r[2]
        self.writer_s = {}  # how long each writer takes whole: kills land within that time
        for which in ("q4nx-pack", "oga-extract"):
            argv, stdin = self.writer_cmd(which, os.path.join(self.work, "timing.out"))
            r = self.run(argv, stdin=stdin, timeout=120)
            self.writer_s[which] = r[3]
            os.unlink(os.path.join(self.work, "timing.out"))

    def mutant(self, src, edit):
        b = bytearray(open(src, "rb").read())
        b = edit(b)
        p = os.path.join(self.work, "m" + os.path.splitext(src)[1])
        with open(p, "wb") as f:
            f.write(b)
        return p

    def byte_edits(self, size, tail_bytes, count):
        """(name, edit) pairs: flips anywhere, flips in the tail, truncations, zeroed runs, appended bytes"""
        rng, out = self.rng, []
        for i in range(count):
            kind = ("flip", "flip", "tail", "tail", "trunc", "zero", "append")[i % 7]
            if kind == "flip":
                o, bit = rng.randrange(size), 1 << rng.randrange(8)
                out.append(("flip@%d^%d" % (o, bit), lambda b, o=o, bit=bit: b[:o] + bytes([b[o] ^ bit]) + b[o + 1:]))
            elif kind == "tail":
                o, v = size - 1 - rng.randrange(min(size, tail_bytes)), rng.randrange(256)
                out.append(("set@%d=%d" % (o, v), lambda b, o=o, v=v: b[:o] + bytes([v if v != b[o] else v ^ 1]) + b[o + 1:]))
            elif kind == "trunc":
                n = rng.randrange(size)
                out.append(("truncate@%d" % n, lambda b, n=n: b[:n]))
            elif kind == "zero":
                o, n = rng.randrange(size), rng.choice((8, 64, 4096))
                out.append(("zero@%d+%d" % (o, n), lambda b, o=o, n=n: b[:o] + bytes(len(b[o:o + n])) + b[o + n:]))
            else:
                n = rng.choice((1, 64, 4096))
                out.append(("append+%d" % n, lambda b, n=n: b + bytes(rng.randrange(256) for _ in range(n))))
        return out

    # ---- classes ----
    def c_container(self):
        size = os.path.getsize(self.cont)
        for name, edit in self.byte_edits(size, 64 << 10, self.n(400)):
            m = self.mutant(self.cont, edit)
            v = self.run(["q4nx-verify", m], timeout=60)
            rv = self.run(["npu-forward", "run", "--verify", "-m", m, "-p", "Hello", "-n", "3", "-t", "1"], timeout=60)
            r = self.run(["npu-forward", "run", "-m", m, "-p", "Hello", "-n", "3", "-t", "1"], timeout=60)
            extra = []
            if (v[0] == 0) != (rv[0] == 0):
                extra.append("disagreed: q4nx-verify exit %d, npu-forward --verify exit %d" % (v[0], rv[0]))
            if rv[0] == 0 and rv[2] != self.ref_out:
                extra.append("disagreed: npu-forward --verify ran a changed container to different output")
            self.record("container", name, [("verify", v), ("run --verify", rv), ("run", r)], extra)

    def c_stream(self):
        size = os.path.getsize(self.stream)
        for name, edit in self.byte_edits(size, 4096, self.n(200)):
            m = self.mutant(self.stream, edit)
            d = os.path.join(self.work, "out")
            os.makedirs(d, exist_ok=True)
            out = os.path.join(d, "x.q4nx")
            p = self.run(["q4nx-pack", "-o", out], stdin=m, timeout=60)
            steps, extra = [("pack", p)], []
            if p[0] == 0:
                r = self.run(["npu-forward", "run", "-m", out, "-p", "Hello", "-n", "3", "-t", "1"], timeout=60)
                steps.append(("run", r))
                if r[0]:
                    extra.append("disagreed: q4nx-pack accepted, npu-forward exit %d" % r[0])
                left = self.leftovers(d, ("x.q4nx",))
            else:
                left = self.leftovers(d)
            if left:
                extra.append("left files: %s" % left)
            shutil.rmtree(d)
            self.record("stream", name, steps, extra)

    def pack_copy(self):
        d = tempfile.mkdtemp(dir=self.work, prefix="pack-")
        for f in os.listdir(self.pack):
            if not f.startswith("."):
                os.symlink(os.path.join(self.pack, f), os.path.join(d, f))
        return d

    def own(self, d, f):
        p = os.path.join(d, f)
        data = open(p, "rb").read()
        os.unlink(p)
        with open(p, "wb") as o:
            o.write(data)
        return p

    HOSTILE = [0, -1, 1, 2 ** 31, 2 ** 33, 2 ** 40, 2 ** 62, 2 ** 64, -2 ** 63, 1e308, 0.5, -0.0, "", "x" * 1000,
               "unknown", "llama", "phi3", "qwen3", "qwen2", None, True, [], {}, [1, 2], {"a": 1}, "\u0000", "\ud7ff"]

    def json_edit(self, obj):
        """a random value somewhere in obj replaced by a hostile one, or a key removed"""
        rng = self.rng
        paths = []

        def walk(o, path):
            if isinstance(o, dict):
                for k, v in o.items():
                    paths.append(path + [k])
                    walk(v, path + [k])
            elif isinstance(o, list):
                for i, v in enumerate(o[:8]):
                    paths.append(path + [i])
                    walk(v, path + [i])
        walk(obj, [])
        path = rng.choice(paths)
        parent = obj
        for k in path[:-1]:
            parent = parent[k]
        if isinstance(parent, dict) and rng.random() < 0.2:
            del parent[path[-1]]
            return "del " + "/".join(map(str, path))
        v = rng.choice(self.HOSTILE)
        parent[path[-1]] = v
        return "%s=%s" % ("/".join(map(str, path)), json.dumps(v)[:40])

    def c_pack(self):
        rng = self.rng
        for i in range(self.n(300)):
            d = self.pack_copy()
            kind = ("genai_config.json", "config.json", "tokenizer_config.json", "genai_config.json", "onnx", "onnx",
                    "data", "file")[i % 8]
            if kind.endswith(".json"):
                p = self.own(d, kind)
                obj = json.load(open(p))
                what = kind + ": " + self.json_edit(obj)
                json.dump(obj, open(p, "w"))
            elif kind == "onnx":
                p = self.own(d, "model.onnx")
                b = bytearray(open(p, "rb").read())
                o = rng.randrange(len(b))
                if rng.random() < 0.8:
                    b[o] ^= 1 << rng.randrange(8)
                    what = "model.onnx flip@%d" % o
                else:
                    b = b[:o]
                    what = "model.onnx truncate@%d" % o
                open(p, "wb").write(b)
            elif kind == "data":
                p = self.own(d, "model.onnx.data")
                n = rng.randrange(os.path.getsize(p))
                os.truncate(p, n)
                what = "model.onnx.data truncate@%d" % n
            else:
                f = rng.choice(("genai_config.json", "config.json", "tokenizer.json", "tokenizer_config.json",
                                "model.onnx", "model.onnx.data"))
                how = rng.choice(("remove", "fifo", "dir", "dangling", "empty", "loop"))
                p = os.path.join(d, f)
                os.unlink(p)
                if how == "fifo":
                    os.mkfifo(p)
                elif how == "dir":
                    os.mkdir(p)
                elif how == "dangling":
                    os.symlink(os.path.join(d, "nowhere"), p)
                elif how == "empty":
                    open(p, "w").close()
                elif how == "loop":
                    os.symlink(p, p)
                what = "%s %s" % (f, how)
            info = self.run(["oga-info", d], timeout=60)
            steps, extra = [("oga-info", info)], []
            if info[0] == 0:
                s = os.path.join(self.work, "p.ogax")
                c = os.path.join(self.work, "p.q4nx")
                ex = self.run(["oga-extract", "-o", s, d], timeout=120)
                steps.append(("oga-extract", ex))
                if ex[0] == 0:
                    pk = self.run(["q4nx-pack", "-o", c], stdin=s, timeout=120)
                    steps.append(("q4nx-pack", pk))
                    if pk[0] == 0:
                        r = self.run(["npu-forward", "run", "-m", c, "-p", "Hello", "-n", "3", "-t", "1"], timeout=60)
                        steps.append(("run", r))
                        rc = self.run(["npu-forward", "run", "--chat", "-m", c, "-p", "Hello", "-n", "3", "-t", "1"], timeout=60)
                        steps.append(("run --chat", rc))
                # a context_length too small for the prompt is refused by name at run time (exit 3, "does not
                # fit the context"): the prompt is the run's input, which the gates cannot foresee
                bad = [(n, r[0]) for n, r in steps[1:]
                       if r[0] != 0 and not (r[0] == 3 and n.startswith("run") and b"does not fit the context" in r[1])]
                if bad:
                    extra.append("disagreed: oga-info importable, %s exit %d" % bad[0])
                for f in (s, c):
                    if os.path.exists(f):
                        os.unlink(f)
            shutil.rmtree(d)
            self.record("pack", what, steps, extra)

    # (program, option) whose value is an input that may be a stream, read to its end (a prompt, ids, a
    # tokenizer tool's input, an OGAX stream to check)
    TEXT_INPUTS = {("npu-forward run", "-f"), ("npu-forward run", "--ids"), ("npu-forward logits", "--ids"),
                   ("npu-forward tokenize", "-f"), ("npu-forward detokenize", "-f"), ("npu-forward chat", "-f"),
                   ("oga-extract", "-c"), ("oga-extract", "--check")}
    TEXT_POSITIONAL = {"npu-forward chat", "npu-forward detokenize"}  # a lone argument is an input file

    def c_cli(self):
        rng = self.rng
        fifo = os.path.join(self.work, "fifo")
        if not os.path.exists(fifo):
            os.mkfifo(fifo)
        nums = ["-1", "0", "1", "99999999999999999999", "1e9", "abc", "", "0x10", "2147483648", "-2147483649", "nan", "inf", " 3"]
        # a missing path inside the work directory: "/nonexistent" as an -o value was written by root (a 17 MB
        # container in /, which then broke t/unit/npu_uapi's missing /nonexistent/accel)
        paths = [os.path.join(self.work, "absent", "file"), "/dev/null", "/", fifo, "/dev/zero", self.work, self.cont,
                 self.stream, self.pack,
                 os.path.join(self.pack, "tokenizer.json"), "", "-", "/proc/self/mem"]
        progs = {
            "oga-info": (["--json", "--help", "-V"], [], ["PATH"]),
            "oga-extract": (["-a", "--allow-incomplete"], ["-o", "-c"], ["PATH"]),
            "q4nx-pack": (["-v"], ["-l", "-o"], []),
            "q4nx-verify": (["--all"], ["--pack", "--sample", "--against"], ["PATH"]),
            "q4nx-gguf": ([], ["-o", "--type"], ["PATH"]),
            "npu-forward run": (["--chat", "--json", "--ignore-eos", "--verify", "--no-mmap"],
                                ["-m", "-p", "-f", "-n", "-t", "-c", "--temp", "--sample-top-k", "--top-p", "--seed",
                                 "--stop", "--mode", "--ids", "--system"], []),
            "npu-forward logits": ([], ["-m", "--ids", "--top-logits", "--feed", "-t", "-c"], []),
            "npu-forward info": ([], ["-m"], []),
            "npu-forward tokenize": (["--lines", "--jsonl", "--no-special"], ["-m", "--tokenizer", "-f"], ["PATH"]),
            "npu-forward detokenize": (["--skip-special", "--stream"], ["-m", "--tokenizer"], ["PATH"]),
            "npu-forward chat": (["--ids", "--jsonl", "--show-template"], ["-m", "--template", "--family", "--tokenizer"], ["PATH"]),
            "npu-gemm": (["--json"], ["--shape", "--reps", "-t", "--mode", "--check-rows", "-m"], []),
            "spec-replay": (["--measure"], ["-m", "-d", "-k", "--mode", "--prompts", "-t"], []),
        }
        names = sorted(progs)
        for i in range(self.n(300)):
            key = names[i % len(names)]
            flags, valued, pos = progs[key]
            argv = key.split()
            # most cases keep a valid model so the bad value reaches the code behind it
            if "-m" in valued and rng.random() < 0.7:
                argv += ["-m", self.cont]
            for _ in range(rng.randrange(1, 4)):
                r = rng.random()
                if r < 0.55 and valued:
                    o = rng.choice(valued)
                    argv += [o, rng.choice(nums + paths)]
                elif r < 0.7 and flags:
                    argv.append(rng.choice(flags))
                elif r < 0.8:
                    argv.append(rng.choice(["--bogus", "-Z", "--", "-", "--" + "x" * 5000, "\xff\xfe"]))
                elif valued:
                    argv.append(rng.choice(valued))  # a valued option without its value
            if pos and rng.random() < 0.8:
                argv.append(rng.choice(paths))
            if key.startswith("npu-forward run") and "-p" not in argv and "-f" not in argv and "--ids" not in argv and rng.random() < 0.5:
                argv += ["-p", "Hello"]
            if key.startswith("npu-forward run") and "-n" not in argv:
                argv += ["-n", "2"]
            stdin = rng.choice([None, self.stream, "/dev/zero"]) if key in ("q4nx-pack", "npu-forward tokenize", "npu-forward detokenize", "npu-forward chat") else None
            fd = writer = None
            # a text input (a prompt, ids, a tokenizer tool's input) may be a stream, read to its end
            # (npu-forward(1)): there the FIFO gets a writer that writes a line and closes, as a shell's
            # <(...) would; anywhere else it gets a writer that never writes, and no program may wait on it
            text_in = any(argv[k + 1] == fifo and ((key, argv[k]) in self.TEXT_INPUTS)
                          for k in range(len(argv) - 1)) or (fifo in argv[2:] and key in self.TEXT_POSITIONAL)
            if text_in:
                writer = subprocess.Popen(["sh", "-c", 'printf "[1, 2]\\n" > "$0"', fifo],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            elif fifo in argv:  # a writer that never writes: readers must not wait on it forever
                fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
            r = self.run(argv, timeout=30, stdin=stdin, cwd=self.work)
            if fd is not None:
                os.close(fd)
            if writer is not None:  # the program did not read it: let the writer's open return, then end it
                rfd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
                try:
                    writer.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    writer.kill()
                    writer.wait()
                os.close(rfd)
            self.record("cli", " ".join(argv)[:300] + (" < " + stdin if stdin else ""), [(key, r)])

    def templates(self):
        rng, out = self.rng, []
        opens = {
            "if": ("{% if true %}", "{% endif %}"), "for": ("{% for x in [1] %}", "{% endfor %}"),
            "macro": None, "set": ("{% set a %}", "{% endset %}"), "filter": ("{% filter upper %}", "{% endfilter %}"),
        }
        exprs = {
            "parens": ("(", "1", ")"), "list": ("[", "1", "]"), "not": ("not ", "true", ""), "neg": ("-", "1", ""),
            "plus": ("1 + ", "1", ""), "attr": ("", "messages", ".x"), "filterchain": ("", "'a'", "|upper"),
            "call": ("range(", "1", ")"), "dict": ("{'a': ", "1", "}"),
        }
        for i in range(self.n(150)):
            depth = rng.choice((10, 100, 199, 201, 1000, 10000, 50000, 200000))
            kind = rng.choice(list(opens) + list(exprs) + ["ranges", "doubling-macro", "join-bomb", "namespace", "tojson-deep"])
            if kind in opens and opens[kind]:
                a, b = opens[kind]
                t = a * depth + "x" + b * depth
            elif kind == "macro":
                d = min(depth, 5000)
                t = "".join("{%% macro m%d() %%}" % j for j in range(d)) + "x" + "{% endmacro %}" * d
            elif kind in exprs:
                a, mid, b = exprs[kind]
                if b and not a:  # postfix chains
                    t = "{{ " + mid + b * depth + " }}"
                else:
                    t = "{{ " + a * depth + mid + b * depth + " }}"
            elif kind == "ranges":
                n = rng.choice((1000, 100000))
                t = "{%% for i in range(%d) %%}{%% for j in range(%d) %%}{%% endfor %%}{%% endfor %%}" % (n, n)
            elif kind == "doubling-macro":
                n = rng.choice((20, 40, 60))
                t = "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% else %}ab{% endif %}{% endmacro %}{{ f(" + str(n) + ") }}"
            elif kind == "join-bomb":
                t = "{% set s = 'xxxxxxxx' %}" + "".join("{%% set s = [s, s, s, s]|join %%}" for _ in range(rng.choice((10, 20, 40)))) + "{{ s|length }}"
            elif kind == "namespace":
                t = "{% set ns = namespace(l=[]) %}{% for i in range(" + str(rng.choice((10 ** 5, 10 ** 7))) + ") %}{% set ns.l = ns.l + [i, i] %}{% endfor %}{{ ns.l|length }}"
            else:
                t = "{{ " + "[" * min(depth, 100000) + "]" * min(depth, 100000) + " |tojson }}"
            out.append(("%s depth %d" % (kind, depth), t))
        return out

    def c_template(self):
        msgs = os.path.join(self.work, "msgs.json")
        json.dump([{"role": "user", "content": "Hello"}], open(msgs, "w"))
        for name, t in self.templates():
            f = os.path.join(self.work, "t.jinja")
            open(f, "w").write(t)
            r = self.run(["npu-forward", "chat", "--tokenizer", self.pack, "--template", f, msgs], timeout=60)
            extra = []
            if r[0] not in (0, 3):
                extra.append("exit %d (0 or 3 expected)" % r[0])
            if r[4] > 2048:
                extra.append("peak memory %.0f MiB" % r[4])
            self.record("template", name, [("chat", r)], extra)

    def writer_cmd(self, which, out):
        if which == "q4nx-pack":
            return ["q4nx-pack", "-o", out], self.stream
        return ["oga-extract", "-o", out, self.pack], None

    def c_kill(self):
        rng = self.rng
        for i in range(self.n(40)):
            which = ("q4nx-pack", "oga-extract")[i % 2]
            d = tempfile.mkdtemp(dir=self.work, prefix="kill-")
            out = os.path.join(d, "out")
            argv, stdin = self.writer_cmd(which, out)
            delay = rng.uniform(0.0, 1.2 * self.writer_s[which])
            t0 = time.monotonic()
            fin = open(stdin, "rb") if stdin else subprocess.DEVNULL
            p = subprocess.Popen([os.path.join(self.bin, argv[0])] + argv[1:], stdin=fin, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, env=self.env)
            time.sleep(delay)
            p.kill()
            _, e = p.communicate()
            if stdin:
                fin.close()
            code = p.returncode
            left = self.leftovers(d, ("out",))
            extra = ["left files: %s" % left] if left else []
            steps = [(which, (code, e, b"", time.monotonic() - t0, 0.0, ["crashed"] if any(m in e for m in SAN_MARKS) else []))]
            if os.path.exists(out):  # finished before the kill: it must be whole
                chk = self.run(["q4nx-verify", out] if which == "q4nx-pack" else ["oga-extract", "-c", out], timeout=60)
                steps.append(("check output", chk))
                if chk[0]:
                    extra.append("the final output is not whole")
            shutil.rmtree(d)
            self.record("kill", "%s killed after %.3f s" % (which, delay), steps, extra)

    def c_disk(self):
        mnt = os.path.join(self.work, "tmpfs")
        os.makedirs(mnt, exist_ok=True)
        if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mnt], capture_output=True).returncode:
            self.stats["disk"] = {"skipped": "needs root and mount -t tmpfs (not available here)"}
            return
        try:
            sizes = [64, 256, 1024, 4096, 8192]
            for i in range(self.n(20)):
                which = ("q4nx-pack", "oga-extract")[i % 2]
                kb = sizes[(i // 2) % len(sizes)]
                subprocess.run(["mount", "-o", "remount,size=%dk" % kb, mnt], check=True)
                for f in os.listdir(mnt):
                    os.unlink(os.path.join(mnt, f))
                out = os.path.join(mnt, "out")
                argv, stdin = self.writer_cmd(which, out)
                r = self.run(argv, stdin=stdin, timeout=60)
                left = self.leftovers(mnt)
                extra = []
                if r[0] == 0:
                    extra.append("exit 0 on a full disk")
                if left:
                    extra.append("left files: %s" % left)
                self.record("disk", "%s into %d KiB" % (which, kb), [(which, r)], extra)
        finally:
            subprocess.run(["umount", mnt])

    def summary(self):
        total = failed = 0
        print("%-10s %6s %7s  %s" % ("class", "cases", "failed", "exit codes seen (step=code: count); slowest; peak RSS"))
        for cls, st in self.stats.items():
            if "skipped" in st:
                print("%-10s skipped: %s" % (cls, st["skipped"]))
                continue
            total += st["cases"]
            failed += st["failed"]
            codes = ", ".join("%s: %d" % kv for kv in sorted(st["codes"].items()))
            print("%-10s %6d %7d  %s; %.1f s; %.0f MiB" % (cls, st["cases"], st["failed"], codes, st["max_s"], st["max_rss_mb"]))
            for k, v in sorted(st["flags"].items()):
                print("%-10s %6s %7d  %s" % ("", "", v, k))
        for f in self.failures[:20]:
            print("FAIL %s: %s: %s" % (f["class"], f["case"][:200], "; ".join(f["flags"])[:300]))
        print("%d cases, %d failed" % (total, failed))
        return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, usage=argparse.SUPPRESS)
    ap.add_argument("-b", "--build", default=os.environ.get("OGAKIT_BUILD", os.path.join(TOP, "build")))
    ap.add_argument("-s", "--scale", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--class", dest="classes", default="container,stream,pack,cli,template,kill,disk")
    ap.add_argument("-o", "--output")
    ap.add_argument("-k", "--keep", action="store_true")
    try:
        a = ap.parse_args()
    except SystemExit as e:
        return 0 if e.code == 0 else 2
    c = Campaign(a)
    try:
        c.setup()
        for cls in a.classes.split(","):
            fn = getattr(c, "c_" + cls, None)
            if not fn:
                sys.stderr.write("attack.py: unknown class %s\n" % cls)
                return 2
            t0 = time.monotonic()
            fn()
            sys.stderr.write("attack.py: %s done in %.0f s\n" % (cls, time.monotonic() - t0))
        return c.summary()
    finally:
        if c.report:
            c.report.close()
        if not a.keep:
            shutil.rmtree(c.work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
