"""The reference side of tests/tokenizer/test_sentencepiece.cpp, with Debian's python3-sentencepiece
(Kudo and Richardson 2018).
  train <corpus> <prefix>       trains a small BPE model with LLaMA 2's settings (byte fallback,
                                identity normalization, a dummy prefix, spaces kept as they are)
  encode <model> <texts.json> <out.json>
                                writes [{"ids": [...], "text": decode(ids)}, ...] for each text
"""
import json
import sys

import sentencepiece as spm

if sys.argv[1] == "train":
    spm.SentencePieceTrainer.train(
        input=sys.argv[2], model_prefix=sys.argv[3], vocab_size=800, model_type="bpe", byte_fallback=True,
        character_coverage=1.0, normalization_rule_name="identity", add_dummy_prefix=True,
        remove_extra_whitespaces=False, split_digits=True, num_threads=1, minloglevel=2)
elif sys.argv[1] == "encode":
    sp = spm.SentencePieceProcessor(model_file=sys.argv[2])
    with open(sys.argv[3], encoding="utf-8") as f:
        texts = json.load(f)
    out = []
    for t in texts:
        ids = sp.encode(t)
        out.append({"ids": ids, "text": sp.decode(ids)})
    with open(sys.argv[4], "w", encoding="utf-8") as f:
        json.dump(out, f)
