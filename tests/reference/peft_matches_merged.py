#!/usr/bin/env python3
"""A LoRA adapter eft trained, loaded with peft on top of the transformers model of its base, gives
the logits of the model eft merged (checkpoint.merge_lora).

Usage: peft_matches_merged.py BASE_DIR ADAPTER_DIR MERGED_DIR

Tolerance: the merged model is stored in the base's dtype. In bf16 its weights carry one bf16
rounding (2^-9 relative) that peft's fp32 adapter path does not; compounded over the layers that stays
within 5% of the largest logit and well below what the adapter itself changed (at most a quarter of
it). In fp32 the merged weights are W + s B A up to one fp32 rounding each, and peft computes
x W^T + s (x A^T) B^T in fp32 in another order: two fp32 evaluations of the same function, so they
differ by about the fp32 error of either, which is measured here as |merged in fp32 - merged in
fp64|; within 4 times that (plus 16 ulps of the largest logit) and a quarter of what the adapter
moved. A wrong scale, a transposed or missing adapter moves the logits by as much as the adapter.
"""
import json
import sys

import peft
import torch
import transformers


def load(directory, dtype=torch.float32):
    try:
        return transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=dtype)
    except TypeError:  # transformers < 4.56 says torch_dtype
        return transformers.AutoModelForCausalLM.from_pretrained(directory, torch_dtype=dtype)


def main():
    base, adapter, merged = sys.argv[1:4]
    ids = torch.arange(3, 131).reshape(2, -1)
    with torch.no_grad():
        want = load(merged)(input_ids=ids).logits
        plain = load(base)(input_ids=ids).logits
        model = peft.PeftModel.from_pretrained(load(base), adapter)
        got = model(input_ids=ids).logits
    err, moved, peak = (got - want).abs().max().item(), (plain - want).abs().max().item(), want.abs().max().item()
    merged_dtype = json.load(open(f"{merged}/config.json")).get("dtype") or \
        json.load(open(f"{merged}/config.json")).get("torch_dtype")
    if merged_dtype == "float32":
        with torch.no_grad():
            exact = load(merged, torch.float64)(input_ids=ids).logits
        bound = 4 * (want.double() - exact).abs().max().item() + peak * 2.0 ** -20
        how = "4 x the merged model's own fp32 error"
    else:
        bound, how = 0.05 * peak, "5% of the largest logit"
    print(f"peft {peft.__version__}: eft's adapter on the transformers model vs eft's merged model ({merged_dtype}), "
          f"max |logit difference| {err:.2e}, bound {bound:.2e} ({how}; the adapter moved the logits by "
          f"{moved:.2e}, largest logit {peak:.2f})")
    return 0 if err <= bound and err * 4 <= moved else 1


if __name__ == "__main__":
    sys.exit(main())
