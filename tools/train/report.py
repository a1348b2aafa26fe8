#!/usr/bin/python3
"""report.py RUNDIR - the training curve as a Markdown table (from log.tsv: train
losses averaged over the preceding 10 steps; held-out losses on the first 32
windows of 256 tokens of the held-out split): the first row, every evaluated
row (each 200 steps) and the last row."""
import sys


def main():
    rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1] + "/log.tsv")]
    head, rows = rows[0], rows[1:]
    print("| step | tokens seen | target train | drafter train | target held-out | drafter held-out | minutes |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for i, r in enumerate(rows):
        d = dict(zip(head, r))
        if d["target_held"] == "nan" and i not in (0, len(rows) - 1):
            continue
        h = lambda v: "" if v == "nan" else v
        print(f"| {d['step']} | {int(d['tokens']):,} | {d['target_train']} | {d['draft_train']} | "
              f"{h(d['target_held'])} | {h(d['draft_held'])} | {int(d['seconds']) / 60:.1f} |")


if __name__ == "__main__":
    main()
