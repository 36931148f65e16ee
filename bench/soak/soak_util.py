#!/usr/bin/env python3
"""Helpers of bench/soak/run.sh (standard library, plus safetensors/numpy from the project's .venv for
`weights`).

  soak_util.py field FILE EXPR          EXPR over the job JSON in FILE (j); prints "" when unreadable
  soak_util.py weights A B              max |a - b| over the tensors of two model.safetensors files,
                                        "inf" when their names or shapes differ
  soak_util.py committed DIR           what is wrong with the checkpoints under DIR ("" if nothing):
                                        a step-N.tmp left behind, or a step-N whose COMMITTED manifest
                                        does not match its files (sizes and CRC-32C)
  soak_util.py table RESULTS            the per-kind table and the "N passed, M failed" line from the
                                        results file (one JSON object per trial)
  soak_util.py tensorboard DIR JOB STEPS  what is wrong with the job's TensorBoard run in DIR ("" if
                                        nothing), as TensorBoard's EventAccumulator (.venv) reads it:
                                        train/loss must hold each step 1..STEPS once, and every point of
                                        the controller's loss history (JOB: the job's JSON) with its value
"""
import json
import statistics
import sys


def field(path, expr):
    try:
        with open(path) as f:
            j = json.load(f)
        print(eval(expr, {}, {"j": j}))  # noqa: S307 - the harness's own expressions
    except Exception:  # noqa: BLE001 - "" means "not known yet" to the caller
        print("")


def weight_diff(a, b):
    """max |a - b| over the tensors of two model.safetensors files; inf when names or shapes differ."""
    from safetensors.numpy import load_file  # the .venv's; only this needs it
    import numpy as np

    ta, tb = load_file(a), load_file(b)
    if ta.keys() != tb.keys() or any(ta[k].shape != tb[k].shape for k in ta):
        return float("inf")
    return max(float(np.max(np.abs(ta[k].astype(np.float64) - tb[k].astype(np.float64)))) for k in ta)


def weights(a, b):
    print(weight_diff(a, b))


def crc32c(data):
    table = _CRC32C_TABLE
    crc = 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _crc32c_table():
    out = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        out.append(c)
    return out


_CRC32C_TABLE = _crc32c_table()


def committed_problems(root):
    """What is wrong with the checkpoints under root, one text each."""
    import os

    problems = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if not name.startswith("step-") or not os.path.isdir(path):
            continue
        if name.endswith(".tmp"):
            problems.append(f"{name} left behind")
            continue
        try:
            with open(os.path.join(path, "COMMITTED")) as f:
                manifest = json.load(f)
        except (OSError, ValueError) as e:
            problems.append(f"{name}: no valid COMMITTED ({e})")
            continue
        for entry in manifest.get("files", []):
            file = os.path.join(path, entry["path"])
            try:
                with open(file, "rb") as f:
                    data = f.read()
            except OSError as e:
                problems.append(f"{name}/{entry['path']}: {e}")
                continue
            if len(data) != entry["bytes"] or crc32c(data) != entry["crc32c"]:
                problems.append(f"{name}/{entry['path']}: size or CRC-32C differs from COMMITTED")
    return problems


def committed(root):
    print("; ".join(committed_problems(root)))


def tensorboard_problems(run_dir, job_path, steps):
    """docs/tracking.md, "TensorBoard": the curve rank 0 wrote against the one the controller kept."""
    import numpy as np  # the .venv's, as tensorboard
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(run_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    if "train/loss" not in acc.Tags()["scalars"]:
        return [f"no train/loss in {run_dir}"]
    points = [(s.step, s.value) for s in acc.Scalars("train/loss")]
    problems = []
    if [s for s, _ in points] != list(range(1, steps + 1)):
        problems.append(f"train/loss has steps {[s for s, _ in points]}, not 1..{steps} once each")
    tb = dict(points)
    with open(job_path) as f:
        history = json.load(f).get("lossHistory", {}).get("train", [])
    if not history:
        problems.append("the controller has no loss history")
    for p in history:
        step, loss = int(p["step"]), float(p["loss"])
        if int(p.get("samples", 1)) != 1:
            problems.append(f"the controller's point at step {step} averages {p['samples']} reports")
        elif step not in tb:
            problems.append(f"the controller's point at step {step} is not in TensorBoard")
        elif tb[step] != float(np.float32(loss)):  # TensorBoard's scalars are float32
            problems.append(f"step {step}: TensorBoard {tb[step]}, the controller {loss}")
    return problems


def tensorboard(run_dir, job_path, steps):
    try:
        problems = tensorboard_problems(run_dir, job_path, int(steps))
    except Exception as e:  # noqa: BLE001 - a check that cannot run fails the trial, saying why
        problems = [f"cannot read it: {type(e).__name__}: {e}"]
    print("; ".join(problems[:3]))


def table(path):
    trials = [json.loads(line) for line in open(path) if line.strip()]
    kinds = sorted({t["kind"] for t in trials})
    print("| fault | trials | passed | recovery s (median) | recovery s (worst) | weights off by (worst) "
          "| steps lost (median) | steps lost (worst) | resumed from memory |")
    print("|---|---|---|---|---|---|---|---|---|")
    for kind in kinds:
        mine = [t for t in trials if t["kind"] == kind]
        rec = [t["recovery_s"] for t in mine if t.get("recovery_s") is not None]
        med = f"{statistics.median(rec):.1f}" if rec else "-"
        worst = f"{max(rec):.1f}" if rec else "-"
        diffs = [t["weight_diff"] for t in mine if t.get("weight_diff") is not None]
        off = f"{max(diffs):.2g}" if diffs else "-"
        lost = [t["steps_lost"] for t in mine if t.get("steps_lost") is not None]
        lost_med = f"{statistics.median(lost):g}" if lost else "-"
        lost_worst = f"{max(lost)}" if lost else "-"
        # Restarts after the first attempt, and how many of them resumed from a memory snapshot.
        sources = [s for t in mine for s in (t.get("resumed_from") or "").split(",") if s]
        memory = f"{sources.count('memory')} of {len(sources)}" if sources else "-"
        print(f"| {kind} | {len(mine)} | {sum(t['passed'] for t in mine)} | {med} | {worst} | {off} "
              f"| {lost_med} | {lost_worst} | {memory} |")
    for t in trials:
        if not t["passed"]:
            print(f"FAILED trial {t['trial']} ({t['kind']}, seed {t['seed']}): {t['why']}")
    passed = sum(t["passed"] for t in trials)
    print(f"{passed} passed, {len(trials) - passed} failed")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "field":
        field(sys.argv[2], sys.argv[3])
    elif cmd == "weights":
        weights(sys.argv[2], sys.argv[3])
    elif cmd == "committed":
        committed(sys.argv[2])
    elif cmd == "table":
        table(sys.argv[2])
    elif cmd == "tensorboard":
        tensorboard(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(f"unknown subcommand {cmd}")
