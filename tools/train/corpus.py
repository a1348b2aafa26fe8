"""Corpus for the bundled model pair: the Python standard library sources.

Files: every *.py under /usr/lib/python3.11 except third-party and build
directories (dist-packages, site-packages, config-*, lib-dynload) and the
generated _sysconfigdata files. PSF licence (/usr/lib/python3.11/LICENSE.txt).

The held-out split is BY FILE: a file is held out when crc32 of its path
relative to the root is 0 mod HOLDOUT_MOD. Files that are not UTF-8 are
skipped. The order is sorted by relative path, so the split is reproducible.
"""
import os
import zlib

ROOT = "/usr/lib/python3.11"
HOLDOUT_MOD = 20
SKIP_DIRS = ("dist-packages", "site-packages", "lib-dynload", "__pycache__")


def files():
    out = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        rel_dir = os.path.relpath(dirpath, ROOT)
        dirnames[:] = sorted(d for d in dirnames
                             if d not in SKIP_DIRS and not d.startswith("config-"))
        for f in filenames:
            if not f.endswith(".py") or f.startswith("_sysconfigdata"):
                continue
            out.append(os.path.normpath(os.path.join(rel_dir, f)))
    return sorted(out)


def held_out(rel):
    return zlib.crc32(rel.encode()) % HOLDOUT_MOD == 0


def load(split):
    """[(relpath, text)] for split 'train' or 'held'."""
    docs = []
    for rel in files():
        if held_out(rel) != (split == "held"):
            continue
        with open(os.path.join(ROOT, rel), "rb") as fh:
            raw = fh.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if text.strip():
            docs.append((rel, text))
    return docs


def manifest():
    """path, bytes, crc32 of the content, split ('train', 'held' or 'skip' when not UTF-8)."""
    for rel in files():
        with open(os.path.join(ROOT, rel), "rb") as fh:
            raw = fh.read()
        try:
            raw.decode("utf-8")
            split = "held" if held_out(rel) else "train"
        except UnicodeDecodeError:
            split = "skip"
        if not raw.strip():
            split = "skip"
        print(f"{rel}\t{len(raw)}\t{zlib.crc32(raw):08x}\t{split}")


if __name__ == "__main__":
    import sys
    if sys.argv[1:] == ["--manifest"]:
        manifest()
        sys.exit(0)
    for split in ("train", "held"):
        d = load(split)
        print(split, len(d), "files", sum(len(t.encode()) for _, t in d), "bytes")
