#!/usr/bin/env python3
"""Regenerates tests/model/tokenizer/testdata/hf_metaspace_llama_spm.txt: what Hugging Face
`tokenizers` encodes for llama.cpp's ggml-vocab-llama-spm reference inputs when that vocabulary
is written as the newer (non-legacy) SentencePiece shape of tokenizer.json — no normalizer, a
Metaspace pre-tokenizer (replacement "▁", prepend_scheme "first", split false) — the oracle of
model_hf_spm_vocab_test's Metaspace case. The tokenizer.json is built from the GGUF the way
transformers' LlamaConverter builds it (hf_spm_vocab_test.cc does the same in C++).

  python3 -m venv /tmp/tok && /tmp/tok/bin/pip install tokenizers
  /tmp/tok/bin/python tests/model/tokenizer/hf_metaspace_reference.py \\
      $(bash deploy/fetch-llamacpp-data.sh | tail -n 1)/vocab > \\
      tests/model/tokenizer/testdata/hf_metaspace_llama_spm.txt

Output: one line per input, "<index>: <ids>" for the .inp inputs (no special tokens added), then
"chat <index>: <ids>" for CHAT (BOS added, control tokens parsed).
"""
import json
import struct
import sys

import tokenizers

CHAT = [
    "<s>[INST] Hi there [/INST] Hello!</s>",
    "  two spaces</s>\n<s>x",
    " leading space",
    "\U0001f999 llama \u4f60\u597d",
]


def read_gguf_vocab(path):
    """tokens, scores, token types of a GGUF file (only the metadata is read)."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b"GGUF", path
    pos = 8
    _, n_kv = struct.unpack_from("<QQ", data, pos)
    pos += 16

    def string():
        nonlocal pos
        (n,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        s = data[pos : pos + n].decode("utf-8")
        pos += n
        return s

    scalar = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
              10: "<Q", 11: "<q", 12: "<d"}

    def value(t):
        nonlocal pos
        if t == 8:
            return string()
        if t == 9:
            (et, n) = struct.unpack_from("<IQ", data, pos)
            pos += 12
            return [value(et) for _ in range(n)]
        fmt = scalar[t]
        (v,) = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return v

    kv = {}
    for _ in range(n_kv):
        key = string()
        (t,) = struct.unpack_from("<I", data, pos)
        pos += 4
        kv[key] = value(t)
    return kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.scores"], kv["tokenizer.ggml.token_type"]


def tokenizer_json(tokens, scores, types):
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = []
    for i, piece in enumerate(tokens):  # SentencePieceExtractor.extract(vocab_scores)
        local = [(piece[:k], piece[k:], scores[i]) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: m[2], reverse=True)
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": types[i] == 4, "special": types[i] != 4}
             for i, t in enumerate(tokens) if types[i] in (2, 3, 4)]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581",
                          "prepend_scheme": "first", "split": False},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"Sequence": {"id": "A", "type_id": 0}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": [f"{l} {r}" for l, r, _ in merges]},
    }


def main():
    vocab_dir = sys.argv[1]
    gguf = f"{vocab_dir}/ggml-vocab-llama-spm.gguf"
    tok = tokenizers.Tokenizer.from_str(json.dumps(tokenizer_json(*read_gguf_vocab(gguf))))
    with open(gguf + ".inp", encoding="utf-8") as f:
        inputs = f.read().split("\n__ggml_vocab_test__\n")
    if inputs and inputs[-1] == "":  # the file ends with a separator
        inputs.pop()
    print(f"# HF tokenizers {tokenizers.__version__}, Metaspace(prepend_scheme first, split false) "
          "tokenizer.json of ggml-vocab-llama-spm; tests/model/tokenizer/hf_metaspace_reference.py")
    for i, text in enumerate(inputs):
        print(f"{i}:", " ".join(map(str, tok.encode(text, add_special_tokens=False).ids)))
    for i, text in enumerate(CHAT):
        print(f"chat {i}:", " ".join(map(str, tok.encode(text).ids)))


if __name__ == "__main__":
    main()
