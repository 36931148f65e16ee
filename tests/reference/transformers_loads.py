#!/usr/bin/env python3
"""eft's final model directory loads in Hugging Face transformers with every weight matched: no
missing, unexpected or mis-shaped tensor, config.json understood, and the logits transformers computes
are finite. (That the numbers mean the same model is HfFixtureTest's job.)

Usage: transformers_loads.py MODEL_DIR
"""
import sys

import torch
import transformers


def load(directory, **kwargs):
    try:
        return transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, **kwargs)
    except TypeError:  # transformers < 4.56 says torch_dtype
        return transformers.AutoModelForCausalLM.from_pretrained(directory, torch_dtype=torch.float32, **kwargs)


def main():
    directory = sys.argv[1]
    model, info = load(directory, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        print(f"transformers {transformers.__version__} loaded {directory} with problems: {problems}")
        return 1
    ids = torch.arange(3, 35).reshape(1, -1)
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    if not torch.isfinite(logits).all():
        print("logits are not finite")
        return 1
    print(f"transformers {transformers.__version__} loaded {directory} ({type(model).__name__}, "
          f"{sum(p.numel() for p in model.parameters())} parameters, every weight matched), logits finite")
    return 0


if __name__ == "__main__":
    sys.exit(main())
