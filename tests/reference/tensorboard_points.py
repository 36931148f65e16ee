#!/usr/bin/env python3
"""Prints a TensorBoard run's scalars as TensorBoard itself reads them (tensorboard's EventAccumulator
from PyPI, pinned in scripts/python-requirements.txt; earlier attempts' re-run steps purged as its UI
does): what tests/e2e/mlflow_test.cc checks eft-train's event files against.

Usage: tensorboard_points.py RUN_DIR
Output: {"TAG": [[step, value], ...], ...} in TensorBoard's order
"""
import json
import sys

from tensorboard.backend.event_processing import event_accumulator


def main():
    acc = event_accumulator.EventAccumulator(sys.argv[1], size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    out = {tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
