#!/usr/bin/python3
"""Independent greedy decoding for eft-train generate: no KV cache, the whole sequence recomputed
for every new token with the formulas of llama_reference.py (which parses the HF directory itself).

Usage: generate_reference.py HF_DIR --prompt 1,2,3 --max-new-tokens N [--eos 7,8]
Prints one JSON object: {"tokens": [new ids, without the eos that stopped them],
  "stop": "eos" | "max_new_tokens", "margins": [top-1 minus top-2 logit at each step]}
(the margins say how far each choice was from a tie, for diagnosing a mismatch).
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_reference as ref  # noqa: E402


def ids_arg(text):
    return [int(x) for x in text.split(",") if x]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("hf_dir")
    parser.add_argument("--prompt", type=ids_arg, required=True)
    parser.add_argument("--max-new-tokens", type=int, required=True)
    parser.add_argument("--eos", type=ids_arg, default=[])
    args = parser.parse_args()
    torch.set_num_threads(1)
    config, params = ref.read_hf_dir(args.hf_dir)
    cfg = ref.Config(config)
    sequence = list(args.prompt)
    tokens, margins, stop = [], [], "max_new_tokens"
    with torch.no_grad():
        while len(tokens) < args.max_new_tokens:
            T = len(sequence)
            batch = {
                "input_ids": torch.tensor([sequence], dtype=torch.long),
                "labels": torch.full((1, T), -100, dtype=torch.long),
                "position_ids": torch.arange(T, dtype=torch.long).unsqueeze(0),
                "segment_ids": torch.ones(1, T, dtype=torch.long),
            }
            logits, _ = ref.forward(cfg, params, batch)
            last = logits[0, -1].double()
            top2 = torch.topk(last, 2).values
            margins.append(float(top2[0] - top2[1]))
            token = int(torch.argmax(last))
            if token in args.eos:
                stop = "eos"
                break
            tokens.append(token)
            sequence.append(token)
    print(json.dumps({"tokens": tokens, "stop": stop, "margins": margins}))


if __name__ == "__main__":
    main()
