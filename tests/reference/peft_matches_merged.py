#!/usr/bin/env python3
"""A LoRA adapter eft trained, loaded with peft on top of the transformers model of its base, gives
the logits of the model eft merged (checkpoint.merge_lora).

Usage: peft_matches_merged.py BASE_DIR ADAPTER_DIR MERGED_DIR

Tolerance: the merged model is stored in the base's dtype (bf16), so its weights carry one bf16
rounding (2^-9 relative) that peft's fp32 adapter path does not; compounded over the layers that stays
within 5% of the largest logit and well below what the adapter itself changed (at most a quarter of
it), while a wrong scale, a transposed or missing adapter moves the logits by as much as the adapter.
"""
import sys

import peft
import torch
import transformers


def load(directory):
    try:
        return transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    except TypeError:  # transformers < 4.56 says torch_dtype
        return transformers.AutoModelForCausalLM.from_pretrained(directory, torch_dtype=torch.float32)


def main():
    base, adapter, merged = sys.argv[1:4]
    ids = torch.arange(3, 131).reshape(2, -1)
    with torch.no_grad():
        want = load(merged)(input_ids=ids).logits
        plain = load(base)(input_ids=ids).logits
        model = peft.PeftModel.from_pretrained(load(base), adapter)
        got = model(input_ids=ids).logits
    err, moved, peak = (got - want).abs().max().item(), (plain - want).abs().max().item(), want.abs().max().item()
    print(f"peft {peft.__version__}: eft's adapter on the transformers model vs eft's merged model, max |logit "
          f"difference| {err:.2e} (the adapter moved the logits by {moved:.2e}, largest logit {peak:.2f})")
    return 0 if err <= 0.05 * peak and err * 4 <= moved else 1


if __name__ == "__main__":
    sys.exit(main())
