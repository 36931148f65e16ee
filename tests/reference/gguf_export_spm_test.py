#!/usr/bin/env python3
"""`eft-train export` of a SentencePiece model (tokenizer.model, as Llama 2 and Mistral v0.1 ship it), read
back by gguf-py and checked against the `sentencepiece` package itself.

Usage: gguf_export_spm_test.py EFT_TRAIN WORK_DIR

A SentencePiece BPE model with byte fallback is trained here (sentencepiece's own trainer: pieces of every
kind, unknown, control, user-defined and the 256 byte pieces) and put in fixture directories of the llama
and mistral architectures with a tokenizer_config.json that adds tokens past the model's pieces. What the
file must carry, as llama.cpp's converter (convert_hf_to_gguf.py) writes it:

- tokenizer.ggml.model "llama", pre "default", no merges;
- every piece in id order with sentencepiece's score and kind (unknown 2, control 3, unused 5, byte 6, else
  normal 1: user-defined pieces stay normal, as in the converter); tokenizer_config.json's added tokens
  over them, scored -1000, control when special, else user-defined with U+2581 written as a space; rows
  past the tokenizer "[PAD<id>]", unused, scored -10000;
- BOS/EOS/UNK/PAD ids (tokenizer_config.json's strings, else config.json's ids, else the model's own),
  add_bos (LlamaTokenizer's default: on), add_eos (off), add_space_prefix (the model's add_dummy_prefix,
  also a model trained with it off), the chat template;
- and the weights as for every other export (gguf_export_test.check_file).
A directory whose tokenizer.json is byte-level keeps the byte-level export even with a tokenizer.model
beside it; a tokenizer.model libsentencepiece cannot load is one line, exit 2.
Prints "N passed, M failed"; exit 0 when none failed.
"""
import json
import os
import shutil
import sys

import gguf
import sentencepiece as spm

import gguf_export_test as g  # reads EFT_TRAIN and WORK_DIR from sys.argv as well

V = gguf.GGUFValueType
PIECES = 400  # 256 byte pieces, the text's characters and some merges
ADDED = {  # tokenizer_config.json's added tokens past the model's pieces
    str(PIECES): {"content": "<|im_start|>", "special": True},
    str(PIECES + 1): {"content": "<|im_end|>", "special": True},
    str(PIECES + 2): {"content": "\u2581hello\u2581there", "special": False},
    str(PIECES + 3): {"content": "<|tool|>", "special": False},  # looks like a control token: control
}


def train_spm(out, add_dummy_prefix=True):
    os.makedirs(out, exist_ok=True)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(g.TEXT.split(". ")), model_prefix=os.path.join(out, "tokenizer"), vocab_size=PIECES,
        model_type="bpe", byte_fallback=True, character_coverage=1.0, user_defined_symbols=["<tool>"],
        control_symbols=["<ctl>"], add_dummy_prefix=add_dummy_prefix, minloglevel=2)
    os.remove(os.path.join(out, "tokenizer.vocab"))
    config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<|im_end|>",
              "add_bos_token": True, "add_eos_token": False, "chat_template": g.CHAT_TEMPLATE,
              "added_tokens_decoder": ADDED}
    json.dump(config, open(os.path.join(out, "tokenizer_config.json"), "w"))


def expected_metadata(model_dir, ftype):
    m = g.model_metadata(model_dir, ftype)
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    sp = spm.SentencePieceProcessor(model_file=os.path.join(model_dir, "tokenizer.model"))
    rows = cfg["vocab_size"]
    tokens = [f"[PAD{i}]" for i in range(rows)]
    scores = [-10000.0] * rows
    types = [5] * rows
    for i in range(sp.get_piece_size()):
        tokens[i] = sp.id_to_piece(i)
        scores[i] = sp.get_score(i)
        types[i] = (2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 5 if sp.is_unused(i)
                    else 6 if sp.is_byte(i) else 1)
    for key, a in ADDED.items():
        i = int(key)
        control = a["special"] or (a["content"].startswith("<|") and a["content"].endswith("|>"))
        tokens[i] = a["content"] if control else a["content"].replace("\u2581", " ")
        scores[i] = -1000.0
        types[i] = 3 if control else 4
    proto = open(os.path.join(model_dir, "tokenizer.model"), "rb").read()
    from sentencepiece import sentencepiece_model_pb2 as pb  # noqa: E402 -- sentencepiece's own proto
    mp = pb.ModelProto()
    mp.ParseFromString(proto)
    m.update({
        "tokenizer.ggml.model": ("llama", V.STRING), "tokenizer.ggml.pre": ("default", V.STRING),
        "tokenizer.ggml.tokens": (tokens, V.ARRAY), "tokenizer.ggml.scores": (scores, V.ARRAY),
        "tokenizer.ggml.token_type": (types, V.ARRAY),
        "tokenizer.ggml.bos_token_id": (sp.bos_id(), V.UINT32), "tokenizer.ggml.eos_token_id": (sp.eos_id(), V.UINT32),
        "tokenizer.ggml.unknown_token_id": (sp.unk_id(), V.UINT32),
        "tokenizer.ggml.padding_token_id": (PIECES + 1, V.UINT32),
        "tokenizer.ggml.add_bos_token": (True, V.BOOL), "tokenizer.ggml.add_eos_token": (False, V.BOOL),
        "tokenizer.ggml.add_space_prefix": (mp.normalizer_spec.add_dummy_prefix, V.BOOL),
        "tokenizer.chat_template": (g.CHAT_TEMPLATE, V.STRING),
    })
    return m


def main():
    shutil.rmtree(g.WORK, ignore_errors=True)
    os.makedirs(g.WORK)
    tok = os.path.join(g.WORK, "tok-spm")
    train_spm(tok)
    rows = PIECES + len(ADDED) + 4  # 4 rows past the tokenizer
    kinds = None

    def fixture(name, arch, tokenizer, **kw):
        d = os.path.join(g.WORK, name)
        g.init_model(d, arch, tokenizer, rows, **kw)
        assert os.path.exists(os.path.join(d, "tokenizer.model")), "init-model did not copy tokenizer.model"
        return d

    llama = fixture("spm-llama", "llama", tok, dtype="float32")
    sp = spm.SentencePieceProcessor(model_file=os.path.join(tok, "tokenizer.model"))
    kinds = {k for i in range(sp.get_piece_size()) for k in
             [("unknown" if sp.is_unknown(i) else "control" if sp.is_control(i) else "byte" if sp.is_byte(i) else "")]}
    assert {"unknown", "control", "byte"} <= kinds, f"the fixture lacks piece kinds: {kinds}"
    g.check("spm-llama", g.export_all_types(llama, metadata=expected_metadata))
    mistral = fixture("spm-mistral", "mistral", tok, dtype="bfloat16", tie=True)
    g.check("spm-mistral", g.export_all_types(mistral, types=("f16", "q8_0"), metadata=expected_metadata))

    # add_dummy_prefix off travels as add_space_prefix false.
    tok_no_prefix = os.path.join(g.WORK, "tok-spm-no-prefix")
    train_spm(tok_no_prefix, add_dummy_prefix=False)
    g.check("spm-no-dummy-prefix", g.export_all_types(fixture("spm-no-prefix", "llama", tok_no_prefix),
                                                       types=("f32",), metadata=expected_metadata))

    # A Llama 2 style directory: tokenizer.json (SentencePiece-style BPE: not byte-level) beside
    # tokenizer.model; the tokenizer.model is what is exported.
    both = os.path.join(g.WORK, "spm-with-tokenizer-json")
    shutil.copytree(llama, both)
    g.make_tokenizer(os.path.join(g.WORK, "tok-metaspace"), "metaspace")
    shutil.copy(os.path.join(g.WORK, "tok-metaspace", "tokenizer.json"), os.path.join(both, "tokenizer.json"))
    g.check("spm-beside-a-metaspace-tokenizer-json", g.export_all_types(both, types=("f32",), metadata=expected_metadata))

    # A byte-level tokenizer.json stays the tokenizer even with a tokenizer.model beside it.
    byte_level = os.path.join(g.WORK, "byte-level-with-spm")
    g.make_tokenizer(os.path.join(g.WORK, "tok-gpt2"), "gpt-2")
    g.init_model(byte_level, "llama", os.path.join(g.WORK, "tok-gpt2"), rows)
    shutil.copy(os.path.join(tok, "tokenizer.model"), os.path.join(byte_level, "tokenizer.model"))
    g.check("byte-level-tokenizer-json-wins", g.export_all_types(byte_level, types=("f32",)))

    broken = os.path.join(g.WORK, "spm-broken")
    shutil.copytree(llama, broken)
    open(os.path.join(broken, "tokenizer.model"), "wb").write(b"\x0a\x05hello not a model")
    out = os.path.join(g.WORK, "x.gguf")
    g.check("unloadable-tokenizer-model", g.one_line_error(["export", "--model", broken, "--out", out], 2,
                                                           "tokenizer.model"))

    print(f"{g.passed} passed, {g.failed} failed")
    return 0 if g.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
