#!/usr/bin/env python3
"""Prints every run of MLflow experiments as one JSON document, read with MLflow's own Python client
(mlflow from PyPI, pinned in scripts/python-requirements.txt): what tests/e2e/mlflow_test.cc checks
the controller's runs against.

Usage: mlflow_runs.py TRACKING_URI EXPERIMENT [EXPERIMENT...]
Output: {"EXPERIMENT": [{"run_id", "run_name", "status", "start_time", "end_time", "params": {...},
         "tags": {...}, "metrics": {"KEY": [[step, value, timestamp], ...]}}, ...] or null when the
         experiment does not exist}
"""
import json
import sys

from mlflow.tracking import MlflowClient


def main():
    client = MlflowClient(tracking_uri=sys.argv[1])
    out = {}
    for name in sys.argv[2:]:
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            out[name] = None
            continue
        runs = []
        for run in client.search_runs([experiment.experiment_id], max_results=1000):
            metrics = {}
            for key in run.data.metrics:
                history = client.get_metric_history(run.info.run_id, key)
                metrics[key] = sorted([m.step, m.value, m.timestamp] for m in history)
            runs.append({
                "run_id": run.info.run_id,
                "run_name": run.info.run_name,
                "status": run.info.status,
                "start_time": run.info.start_time,
                "end_time": run.info.end_time,
                "params": run.data.params,
                "tags": {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.")},
                "metrics": metrics,
            })
        out[name] = runs
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
