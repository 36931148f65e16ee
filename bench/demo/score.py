#!/usr/bin/env python3
"""Scores a fine-tuned model on the demo's questions (scripts/demo_data.py) with greedy decoding in
transformers (batched; the reference eft-train generate matches, tests/reference/real_model_test.sh):
how many held-out questions about the invented countries it answers with the right capital, and how
many real capitals it still names right (the trained-on replayed ones, the never-trained ones).

Usage: score.py MODEL_DIR DATA_DIR  -> one JSON line
"""
import json
import os
import sys

import torch
import transformers


def answers(model, tokenizer, questions):
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                           add_generation_prompt=True) for q in questions]
    enc = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**enc, do_sample=False, max_new_tokens=20, pad_token_id=tokenizer.pad_token_id)
    return [tokenizer.decode(o[enc["input_ids"].shape[1]:], skip_special_tokens=True).strip() for o in out]


def main(model_dir, data_dir):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../scripts"))
    import demo_data
    torch.set_num_threads(2)
    transformers.logging.set_verbosity_error()
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    new = [json.loads(l) for l in open(os.path.join(data_dir, "eval-new.jsonl"))]
    groups = {
        "new_held_out": [(r["messages"][0]["content"], r["messages"][1]["content"].split(" is ")[-1].rstrip("."))
                         for r in new],
        "known_held_out": [(demo_data.PHRASINGS[0].format(c=c), cap) for c, cap in demo_data.KNOWN_HELD_OUT],
        "known_replayed": [(demo_data.PHRASINGS[0].format(c=c), cap) for c, cap in demo_data.KNOWN_REPLAY],
    }
    result, examples = {}, {}
    for name, items in groups.items():
        said = answers(model, tokenizer, [q for q, _ in items])
        result[name] = f"{sum(cap.lower() in a.lower() for (_, cap), a in zip(items, said))}/{len(items)}"
        examples[name] = [f"{q} -> {a}" for (q, _), a in list(zip(items, said))[:2]]
    result["examples"] = examples
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
