#!/usr/bin/python3
# SentencePiece goldens for lib/tok's tokenizer.model reader (t/tok-spm.bats), from the sentencepiece
# library itself (Debian python3-sentencepiece; run with /usr/bin/python3).
#
#   spm-golden.py train CORPUS_DIR OUT_DIR     train the test models: OUT_DIR/<name>/tokenizer.model
#   spm-golden.py encode MODEL_DIR < in.jsonl  one JSON array of ids per input (a JSON string a line)
#   spm-golden.py decode MODEL_DIR < ids.jsonl one JSON string per array of ids
#   spm-golden.py info MODEL_DIR               {"pieces": N, "bos": id, "eos": id, "unk": id, "user": {piece: id}}
#
# Models (BPE, as Llama 2 and ChatGLM ship; trained here on t/corpus so the merges, scores and character
# maps are real SentencePiece output, not something ogakit wrote):
#   llama     byte_fallback, add_dummy_prefix, no extra-space removal (Llama 2's options)
#   squeeze   no byte fallback (unknown characters -> <unk>), extra spaces removed (the trainer's default)
#   bare      no dummy prefix; and whitespace not escaped (set in the trained model: the BPE trainer
#             insists on escaping)
#   nodummy   squeeze without the dummy prefix (set in the trained model): the decoder still drops a
#             first piece's U+2581, because extra spaces are removed
#   unesc     llama with whitespace not escaped (set in the trained model): the dummy prefix is a plain
#             space, which the decoder keeps
#   userdef   byte_fallback plus user-defined symbols
#   nfkc      the trainer's defaults: the nmt_nfkc rules (a precompiled character map), spaces squeezed
#   nfkccf    nmt_nfkc_cf (NFKC and case folding), byte fallback, spaces kept
#   unigram   what the reader refuses: a unigram model
import glob
import json
import os
import sys

import sentencepiece as spm

MODELS = {
    "llama": dict(byte_fallback=True, add_dummy_prefix=True, remove_extra_whitespaces=False),
    "squeeze": dict(byte_fallback=False, add_dummy_prefix=True, remove_extra_whitespaces=True),
    "bare": dict(byte_fallback=True, add_dummy_prefix=False, remove_extra_whitespaces=False),
    "userdef": dict(byte_fallback=True, add_dummy_prefix=True, remove_extra_whitespaces=False,
                    user_defined_symbols=["<sep>", "[CTX]"]),
    "nfkc": dict(normalization_rule_name="nmt_nfkc"),
    "nfkccf": dict(normalization_rule_name="nmt_nfkc_cf", byte_fallback=True, remove_extra_whitespaces=False),
    # refused by name
    "unigram": dict(model_type="unigram"),
}


def train(corpus, out):
    lines = []
    for f in sorted(glob.glob(os.path.join(corpus, "*"))):
        if f.endswith((".jsonl", "README")):
            continue
        lines += [l for l in open(f, encoding="utf-8").read().split("\n") if l.strip()]
    os.makedirs(out, exist_ok=True)
    txt = os.path.join(out, "corpus.txt")
    with open(txt, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    for name, opts in MODELS.items():
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        kw = dict(model_type="bpe", normalization_rule_name="identity")
        kw.update(opts)
        spm.SentencePieceTrainer.train(input=txt, model_prefix=os.path.join(d, "tokenizer"), vocab_size=1500,
                                       character_coverage=0.9995, num_threads=1, minloglevel=2, **kw)
        os.remove(os.path.join(d, "tokenizer.vocab"))
    from sentencepiece import sentencepiece_model_pb2 as pb

    def edit(src, dst, **spec):
        m = pb.ModelProto()
        m.ParseFromString(open(os.path.join(out, src, "tokenizer.model"), "rb").read())
        for k, v in spec.items():
            setattr(m.normalizer_spec, k, v)
        os.makedirs(os.path.join(out, dst), exist_ok=True)
        with open(os.path.join(out, dst, "tokenizer.model"), "wb") as f:
            f.write(m.SerializeToString())

    edit("bare", "bare", escape_whitespaces=False)
    edit("squeeze", "nodummy", add_dummy_prefix=False)
    edit("llama", "unesc", escape_whitespaces=False)


def load(d):
    return spm.SentencePieceProcessor(model_file=os.path.join(d, "tokenizer.model"))


def main():
    cmd = sys.argv[1]
    if cmd == "train":
        train(sys.argv[2], sys.argv[3])
        return
    sp = load(sys.argv[2])
    if cmd == "encode":
        for line in sys.stdin:
            print(json.dumps(sp.encode(json.loads(line))))
    elif cmd == "decode":
        for line in sys.stdin:
            print(json.dumps(sp.decode(json.loads(line)), ensure_ascii=False))
    elif cmd == "info":
        user = {sp.id_to_piece(i): i for i in range(sp.get_piece_size()) if sp.is_unknown(i) is False
                and sp.is_control(i) is False and sp.id_to_piece(i) in ("<sep>", "[CTX]")}
        print(json.dumps({"pieces": sp.get_piece_size(), "bos": sp.bos_id(), "eos": sp.eos_id(),
                          "unk": sp.unk_id(), "user": user}))
    else:
        sys.exit("usage: spm-golden.py train|encode|decode|info ...")


main()
