#!/usr/bin/python3
"""report.py RUNDIR [ROWS] - the training curve as a Markdown table (from log.tsv:
train losses averaged over the preceding 10 steps; held-out losses on 32 fixed
windows of 256 tokens), about ROWS rows (default 12) plus every evaluated row."""
import sys


def main():
    rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1] + "/log.tsv")]
    head, rows = rows[0], rows[1:]
    want = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    every = max(1, len(rows) // want)
    print("| step | tokens seen | target train | drafter train | target held-out | drafter held-out | minutes |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for i, r in enumerate(rows):
        d = dict(zip(head, r))
        if i % every and d["target_held"] == "nan" and i != len(rows) - 1:
            continue
        h = lambda v: "" if v == "nan" else v
        print(f"| {d['step']} | {int(d['tokens']):,} | {d['target_train']} | {d['draft_train']} | "
              f"{h(d['target_held'])} | {h(d['draft_held'])} | {int(d['seconds']) / 60:.1f} |")


if __name__ == "__main__":
    main()
