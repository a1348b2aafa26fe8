#!/usr/bin/python3
"""Byte-level BPE: trainer, encoder and Hugging Face tokenizer.json writer.

  bpe.py train OUTDIR [--vocab 4096]   train on the corpus (corpus.py, train split)
                                       and write OUTDIR/tokenizer.json,
                                       OUTDIR/tokenizer_config.json, OUTDIR/merges.txt
  bpe.py dump TOKDIR OUT.json          held-out files + EXTRA with their ids, for
                                       the @huggingface/tokenizers check (tokcheck.mjs)
  bpe.py encode TOKDIR OUTDIR          encode the train and held splits to
                                       OUTDIR/{train,held}.npy (uint16, documents
                                       separated by <|endoftext|>)

Byte level as in GPT-2: every byte maps to one printable unicode character
(bytes_to_unicode below) and token strings in the vocab are strings of those
characters. Pre-tokenisation is one regex (PRETOK, Split "Isolated" in
tokenizer.json, then ByteLevel without its own regex). Encoding merges, within
each pre-token, the adjacent pair of lowest merge rank, leftmost first, until
no pair has a rank: the Hugging Face BPE model's rule.
"""
import json
import os
import sys

import regex

PRETOK = (r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = ("{% for message in messages %}"
                 "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
                 "{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def bytes_to_unicode():
    """GPT-2's map: printable latin-1 bytes map to themselves, the rest to 256+n."""
    keep = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
            + list(range(ord("®"), ord("ÿ") + 1)))
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out


B2U = bytes_to_unicode()
PAT = regex.compile(PRETOK)


def train(texts, vocab_size):
    """Return merges as a list of (id_a, id_b); token id 256+i is merge i."""
    nmerges = vocab_size - 256 - len(SPECIALS)
    counts = {}
    for t in texts:
        for w in PAT.findall(t):
            counts[w] = counts.get(w, 0) + 1
    words = [list(w.encode("utf-8")) for w in counts]
    freq = list(counts.values())
    pairs, where = {}, {}
    for i, w in enumerate(words):
        for p in zip(w, w[1:]):
            pairs[p] = pairs.get(p, 0) + freq[i]
            where.setdefault(p, set()).add(i)
    merges = []
    for m in range(nmerges):
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], -kv[0][0], -kv[0][1]))[0]
        if pairs[best] < 2:
            break
        new = 256 + m
        merges.append(best)
        a, b = best
        for i in list(where.get(best, ())):
            w, f = words[i], freq[i]
            for p in zip(w, w[1:]):
                pairs[p] -= f
                if pairs[p] == 0:
                    del pairs[p]
            out, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and w[j] == a and w[j + 1] == b:
                    out.append(new)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            words[i] = out
            for p in zip(out, out[1:]):
                pairs[p] = pairs.get(p, 0) + f
                where.setdefault(p, set()).add(i)
        where.pop(best, None)
        if m % 500 == 0:
            print(f"bpe: merge {m}/{nmerges}", file=sys.stderr)
    return merges


def token_bytes(merges):
    tb = [bytes([b]) for b in range(256)]
    for a, b in merges:
        tb.append(tb[a] + tb[b])
    return tb


class Encoder:
    def __init__(self, merges):
        self.rank = {p: r for r, p in enumerate(merges)}
        self.cache = {}

    def word(self, w):
        ids = self.cache.get(w)
        if ids is not None:
            return ids
        ids = list(w.encode("utf-8"))
        rank = self.rank
        while len(ids) > 1:
            best, bi = None, -1
            for j in range(len(ids) - 1):
                r = rank.get((ids[j], ids[j + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, j
            if best is None:
                break
            ids[bi:bi + 2] = [256 + best]
        self.cache[w] = ids
        return ids

    def encode(self, text):
        out = []
        for w in PAT.findall(text):
            out.extend(self.word(w))
        return out


def write_hf(outdir, merges):
    os.makedirs(outdir, exist_ok=True)
    tb = token_bytes(merges)
    u = lambda bs: "".join(B2U[x] for x in bs)
    vocab = {u(t): i for i, t in enumerate(tb)}
    assert len(vocab) == len(tb), "duplicate token strings"
    n = len(tb)
    added = [{"id": n + k, "content": s, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}
             for k, s in enumerate(SPECIALS)]
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": PRETOK}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab,
                  "merges": [u(tb[a]) + " " + u(tb[b]) for a, b in merges]},
    }
    with open(os.path.join(outdir, "tokenizer.json"), "w", encoding="utf-8") as fh:
        json.dump(tok, fh, ensure_ascii=False, indent=1)
    cfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added},
        "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 1024,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    with open(os.path.join(outdir, "tokenizer_config.json"), "w", encoding="utf-8") as fh:
        json.dump(cfg, fh, ensure_ascii=False, indent=1)
    with open(os.path.join(outdir, "merges.txt"), "w") as fh:
        for a, b in merges:
            fh.write(f"{a} {b}\n")


def read_merges(tokdir):
    with open(os.path.join(tokdir, "merges.txt")) as fh:
        return [tuple(int(x) for x in line.split()) for line in fh]


# Texts beyond the held-out files for the agreement check: non-ASCII letters and
# digits, CRLF, tabs, runs of digits and spaces, emoji (4-byte UTF-8), mixed scripts.
EXTRA = [
    "caf\u00e9 na\u00efve \u00fcber \u0416\u0443\u043a \u65e5\u672c\u8a9e 12345678 \u0661\u0662\u0663",
    "x = 1\r\n\tif x:\r\n\t\treturn  'it''s'   \n\n\n   \n",
    "emoji \U0001F600\U0001F680 done; ok?! <<= >>= ** // -> ...   ",
    "  leading spaces and trailing   ",
    "",
]


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import corpus
    if len(sys.argv) >= 3 and sys.argv[1] == "train":
        vocab = int(sys.argv[sys.argv.index("--vocab") + 1]) if "--vocab" in sys.argv else 4096
        merges = train([t for _, t in corpus.load("train")], vocab)
        write_hf(sys.argv[2], merges)
        print(f"bpe: {len(merges)} merges, vocab {256 + len(merges) + len(SPECIALS)}", file=sys.stderr)
    elif len(sys.argv) == 4 and sys.argv[1] == "encode":
        import numpy as np
        enc = Encoder(read_merges(sys.argv[2]))
        eot = 256 + len(enc.rank)
        os.makedirs(sys.argv[3], exist_ok=True)
        for split in ("train", "held"):
            ids = []
            for _, t in corpus.load(split):
                ids.append(eot)
                ids.extend(enc.encode(t))
            arr = np.array(ids, dtype=np.uint16)
            np.save(os.path.join(sys.argv[3], split + ".npy"), arr)
            print(f"bpe: {split}: {len(arr)} tokens", file=sys.stderr)
    elif len(sys.argv) == 4 and sys.argv[1] == "dump":
        enc = Encoder(read_merges(sys.argv[2]))
        docs = corpus.load("held") + [("extra:%d" % i, t) for i, t in enumerate(EXTRA)]
        with open(sys.argv[3], "w", encoding="utf-8") as fh:
            json.dump([{"name": n, "text": t, "ids": enc.encode(t)} for n, t in docs], fh, ensure_ascii=False)
        print(f"bpe: {len(docs)} texts -> {sys.argv[3]}", file=sys.stderr)
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
