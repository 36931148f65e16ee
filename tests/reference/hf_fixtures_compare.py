#!/usr/bin/env python3
"""Checks that tests/fixtures/hf/ (committed; made by hf_fixtures.py on the GPU machine on 2026-11-27)
is what hf_fixtures.py makes here, with the pinned transformers and torch of .venv: the same configs,
the same weights and inputs, and logits and loss that agree to fp32 rounding. So the committed
fixtures are reproducible, and eft's model (HfFixtureTest, which reads both) matches the transformers
the project pins, not only the one that made them.

Usage: hf_fixtures_compare.py COMMITTED_DIR REGENERATED_DIR

Tolerances: weights and inputs come from torch's seeded CPU generator and must be equal bit for bit.
Logits and loss are computed by transformers' fp32 eager path on two machines (CPU kernels may sum in
another order with other vector widths): a few ulps of values of magnitude ~10, ~1e-5 at most; a
changed model (another init, a changed formula in transformers) moves them by 1e-2 or more.
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file


def main():
    committed, regenerated = sys.argv[1], sys.argv[2]
    cases = sorted(d for d in os.listdir(committed) if os.path.isdir(os.path.join(committed, d)))
    again = sorted(d for d in os.listdir(regenerated) if os.path.isdir(os.path.join(regenerated, d)))
    assert cases == again, f"cases differ: committed {cases}, regenerated {again}"
    assert cases, f"no fixtures in {committed}"
    failures = []
    for case in cases:
        a, b = os.path.join(committed, case), os.path.join(regenerated, case)
        config_a, config_b = (json.load(open(os.path.join(d, "config.json"))) for d in (a, b))
        for key in sorted(set(config_a) | set(config_b)):
            if key in ("transformers_version",):
                continue
            if config_a.get(key) != config_b.get(key):
                failures.append(f"{case}: config.json {key}: {config_a.get(key)!r} vs {config_b.get(key)!r}")
        wa, wb = load_file(os.path.join(a, "model.safetensors")), load_file(os.path.join(b, "model.safetensors"))
        if sorted(wa) != sorted(wb):
            failures.append(f"{case}: weight names differ")
        for name in sorted(set(wa) & set(wb)):
            if not torch.equal(wa[name], wb[name]):
                failures.append(f"{case}: weight {name} differs (max {(wa[name] - wb[name]).abs().max().item():.3e})")
        ra, rb = (load_file(os.path.join(d, "reference.safetensors")) for d in (a, b))
        for name in ("input_ids", "labels"):
            if not torch.equal(ra[name], rb[name]):
                failures.append(f"{case}: {name} differ")
        logits_diff = (ra["logits"] - rb["logits"]).abs().max().item()
        loss_diff = abs(ra["loss"].item() - rb["loss"].item())
        if logits_diff > 1e-4 or loss_diff > 1e-5 * abs(ra["loss"].item()):
            failures.append(f"{case}: logits differ by {logits_diff:.3e}, loss by {loss_diff:.3e}")
        print(f"{case}: weights and inputs equal, max |logits difference| {logits_diff:.2e}, "
              f"loss difference {loss_diff:.2e}")
    for f in failures:
        print("MISMATCH", f)
    print(f"{len(cases) - len({f.split(':')[0] for f in failures})} passed, "
          f"{len({f.split(':')[0] for f in failures})} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
