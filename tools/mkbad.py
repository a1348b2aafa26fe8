#!/usr/bin/python3
"""mkbad.py - malformed OGA packs for tests (called by mkpack.py --bad NAME / fixture.sh bad NAME)."""
import sys

NAMES = ["truncated-data", "offset-past-end", "not-protobuf", "config-missing-key", "config-wrong-type",
         "dims-contradict", "bits8", "gidx", "block16", "no-tokenizer", "amd-npu"]


def make(name, out):
    sys.stderr.write("mkbad: %s: not written yet\n" % name)
    return 4


if __name__ == "__main__":
    if sys.argv[1:] == ["--list"]:
        print("\n".join(NAMES))
        sys.exit(0)
    sys.exit(2)
