#!/usr/bin/env python3
"""eft-train's TensorBoard event files read back by TensorBoard itself (PyPI's tensorboard, its
EventAccumulator and EventFileLoader), not by eft (docs/tracking.md, "TensorBoard").

Usage: tensorboard_test.py EFT_TRAIN WORK_DIR

A job of 8 steps (a tiny random Llama, pre-tokenized data, two eval sets every 4 steps, a sharded
checkpoint every 3) runs as eft's workers would run it:

- attempt 1, world size 1, dies like a node losing power after step 5 (EFT_DEBUG_KILL_AT_STEP);
- attempt 2, world size 2, resumes from the newest checkpoint (step 3), trains steps 4..8 again
  and on to the end, with a peak TFLOP/s so that MFU is known.

Then, in <checkpoint.dir>/tensorboard, one run with one file per attempt in attempt order:

- every step 1..8 is in train/loss, train/learning_rate, train/grad_norm and
  train/tokens_per_second exactly once, equal to the step event of the attempt that trained it last
  (attempt 1 for 1..3, attempt 2 for 4..8: the re-run steps show the second attempt's values);
  train/mfu only at attempt 2's steps; eval/<set>/loss at steps 0, 4, 8 for both sets, from the
  eval events the same way. Equal means: the event's value (JSON, a double printed to round-trip)
  rounded to float32 is the stored float32, exactly (TensorBoard's scalars are float32);
- eft/attempt and eft/world_size show both attempts (1 at step 0; 2 at steps 4 and 8);
- each file starts with file_version brain.Event:2 and a SessionLog START (attempt 1 at step 0,
  attempt 2 at step 4); only the finished attempt ends with a SessionLog STOP (at step 8).

The TensorBoard server the UI reads (`tensorboard --load_fast=true`: its Rust data server) shows the
same points over its HTTP API; with attempt 1's file cut short mid-record (a rank killed mid-write)
TensorBoard still reads every point from attempt 2's file.

And tracking never fails training: with spec.tracking.tensorboard under a regular file, and with a
file size limit that a write hits in the middle of the run (EFBIG, as a full disk), the job still
finishes, with one warning; in the second case TensorBoard still reads every point written before.
Prints "N passed, M failed"; exit 0 when none failed.
"""
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import time
import traceback
import urllib.parse
import urllib.request

import numpy as np
from tensorboard.backend.event_processing import event_accumulator, event_file_loader

EFT = sys.argv[1]
WORK = sys.argv[2]
STEPS = 8
TRAIN_TAGS = {"train/loss": "loss", "train/learning_rate": "lr", "train/grad_norm": "grad_norm",
              "train/tokens_per_second": "tokens_per_s"}
EVAL_SETS = ("heldout", "other")


def write_data(path, n, seed):
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for _ in range(n):
            ids = [int(x) for x in rng.integers(1, 128, size=int(rng.integers(8, 24)))]
            f.write(json.dumps({"input_ids": ids, "labels": [-100] * 3 + ids[3:]}) + "\n")


def write_spec(name, checkpoint_dir, tensorboard=None, cache=None):
    path = os.path.join(WORK, f"{name}.yaml")
    lines = [f"name: {name}", f"model: {WORK}/model",
             f"data: {{train: {WORK}/train.jsonl, format: pretokenized, max_seq_len: 32, packing: false"
             + (f", cache_dir: {cache}" if cache else "")
             + f", eval: [{{name: heldout, path: {WORK}/heldout.jsonl}}, {{name: other, path: {WORK}/other.jsonl}}]}}",
             f"training: {{global_batch_size: 4, micro_batch_size: 2, lr: 1.0e-3, precision: fp32, max_steps: {STEPS},"
             " eval_every_steps: 4}"]
    if checkpoint_dir:
        lines.append(f"checkpoint: {{dir: {checkpoint_dir}, every_steps: 3}}")
    if tensorboard:
        lines.append(f"tracking: {{tensorboard: {tensorboard}}}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def train(spec, name, attempt, *extra, env=None, preexec_fn=None):
    """`eft-train train` as a worker runs an attempt; (result, its rank events)."""
    events = os.path.join(WORK, f"{name}.events")
    with open(events, "w") as ev:
        r = subprocess.run([EFT, "train", "--config", spec, "--threads", "1", *extra], capture_output=True, text=True,
                           pass_fds=(ev.fileno(),), preexec_fn=preexec_fn,
                           env=dict(os.environ, EFT_EVENTS_FD=str(ev.fileno()), EFT_JOB_ID="tb-test",
                                    EFT_ATTEMPT=str(attempt), **(env or {})))
    return r, [json.loads(line) for line in open(events) if line.strip()]


def accumulate(run_dir):
    acc = event_accumulator.EventAccumulator(run_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return acc


def points(acc, tag):
    return [(s.step, s.value) for s in acc.Scalars(tag)]


def f32(x):
    return float(np.float32(x))


def expect_points(acc, tag, want):
    """`want`: [(step, the event's double)]; the stored points are exactly these, in step order."""
    got = points(acc, tag)
    assert [s for s, _ in got] == [s for s, _ in want], f"{tag}: steps {[s for s, _ in got]}, want {[s for s, _ in want]}"
    for (step, value), (_, expected) in zip(got, want):
        assert value == f32(expected), f"{tag} at step {step}: {value} != float32({expected}) = {f32(expected)}"


def tensorboard_warnings(stderr):
    return [line for line in stderr.splitlines() if " W " in line and "] TensorBoard:" in line]


def raw_events(path):
    return list(event_file_loader.EventFileLoader(path).Load())


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    r = subprocess.run([EFT, "init-model", "--arch", "llama", "--hidden", "64", "--layers", "2", "--heads", "4",
                        "--kv-heads", "2", "--intermediate", "96", "--vocab-size", "128", "--dtype", "float32",
                        "--seed", "1", "--out", f"{WORK}/model"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    write_data(f"{WORK}/train.jsonl", 48, 1)
    write_data(f"{WORK}/heldout.jsonl", 6, 2)
    write_data(f"{WORK}/other.jsonl", 4, 3)
    ckpt = f"{WORK}/ckpt"
    spec = write_spec("tb-job", ckpt)

    passed, failed = 0, 0

    def check(name, fn):
        nonlocal passed, failed
        try:
            fn()
            passed += 1
            print(f"PASS {name}")
        except Exception:  # noqa: BLE001 - every failure is reported, then counted
            failed += 1
            print(f"FAIL {name}\n{traceback.format_exc()}")

    state = {}

    def two_attempts():
        r1, ev1 = train(spec, "attempt1", 1, "--nproc", "1", env={"EFT_DEBUG_KILL_AT_STEP": "5"})
        assert r1.returncode != 0, "attempt 1 was to die after step 5"
        assert [e["step"] for e in ev1 if e["event"] == "step"] == [1, 2, 3, 4, 5], ev1
        r2, ev2 = train(spec, "attempt2", 2, "--nproc", "2", "--peak-tflops", "0.001",
                        env={"EFT_RESUME_FROM": "auto"})
        assert r2.returncode == 0, r2.stderr[-3000:]
        resumed = [e for e in ev2 if e["event"] == "resumed"]
        assert resumed and resumed[0]["step"] == 3, resumed
        assert [e["step"] for e in ev2 if e["event"] == "step"] == [4, 5, 6, 7, 8]
        assert ev2[-1]["event"] == "finished", ev2[-1]
        assert f"tensorboard --logdir {ckpt}/tensorboard" in r2.stderr, r2.stderr[-3000:]
        state.update(ev1=ev1, ev2=ev2)

    check("two attempts train, the second resuming from step 3 at world size 2", two_attempts)
    if "ev1" not in state:
        print(f"{passed} passed, {failed + 1} failed (the rest need the two attempts)")
        return 1
    ev1, ev2 = state["ev1"], state["ev2"]
    run_dir = f"{ckpt}/tensorboard"
    # The points TensorBoard must show: a step's values from the attempt that trained it last.
    steps = {e["step"]: e for e in ev1 if e["event"] == "step"}
    steps.update({e["step"]: e for e in ev2 if e["event"] == "step"})
    evals = {}
    for e in ev1 + ev2:  # in time order: the later attempt's evaluation of a step wins
        if e["event"] == "eval":
            evals[(e["set"], e["step"])] = e["loss"]

    def every_step_once_with_the_last_attempts_values():
        acc = accumulate(run_dir)
        assert sorted(steps) == list(range(1, STEPS + 1)), sorted(steps)
        for tag, key in TRAIN_TAGS.items():
            expect_points(acc, tag, [(s, steps[s][key]) for s in sorted(steps)])
        # Attempt 2 knew a peak (and so MFU); attempt 1 did not and wrote none.
        assert all("mfu" not in e for e in ev1 if e["event"] == "step")
        expect_points(acc, "train/mfu", [(s, steps[s]["mfu"]) for s in range(4, STEPS + 1)])
        # The re-run steps are attempt 2's, not attempt 1's (a duplicate would also fail the steps above).
        for s in (4, 5):
            assert steps[s] is next(e for e in ev2 if e["event"] == "step" and e["step"] == s)

    check("every step once in train/*, each the values of the attempt that trained it last",
          every_step_once_with_the_last_attempts_values)

    def eval_points():
        acc = accumulate(run_dir)
        for name in EVAL_SETS:
            want = sorted((step, loss) for (s, step), loss in evals.items() if s == name)
            assert [step for step, _ in want] == [0, 4, 8], want
            expect_points(acc, f"eval/{name}/loss", want)

    check("eval/<set>/loss for both sets at steps 0, 4, 8", eval_points)

    def attempts_visible():
        acc = accumulate(run_dir)
        assert points(acc, "eft/attempt") == [(0, 1.0), (4, 2.0), (8, 2.0)], points(acc, "eft/attempt")
        assert points(acc, "eft/world_size") == [(0, 1.0), (4, 2.0), (8, 2.0)], points(acc, "eft/world_size")
        want_tags = set(TRAIN_TAGS) | {"train/mfu", "eft/attempt", "eft/world_size"} | {
            f"eval/{n}/loss" for n in EVAL_SETS}
        assert set(acc.Tags()["scalars"]) == want_tags, acc.Tags()["scalars"]

    check("eft/attempt and eft/world_size show both attempts", attempts_visible)

    def one_file_per_attempt_with_its_start_and_end():
        files = sorted(f for f in os.listdir(run_dir))
        assert len(files) == 2 and all(f.startswith("events.out.tfevents.") for f in files), files
        sessions = []
        for f in files:
            events = raw_events(os.path.join(run_dir, f))
            assert events[0].file_version == "brain.Event:2", events[0]
            logs = [(e.step, e.session_log.status) for e in events if e.HasField("session_log")]
            sessions.append(logs)
        start, stop = 1, 2  # tensorboard.SessionLog.SessionStatus
        assert sessions[0] == [(0, start)], f"attempt 1 (killed): {sessions[0]}"
        assert sessions[1] == [(4, start), (8, stop)], f"attempt 2 (finished): {sessions[1]}"
        # Attempt 1's file holds steps 1..5 as written before it died (4 and 5 hidden by attempt 2's START).
        written = [e.step for e in raw_events(os.path.join(run_dir, files[0]))
                   if e.HasField("summary") and any(v.tag == "train/loss" for v in e.summary.value)]
        assert written == [1, 2, 3, 4, 5], written

    check("one file per attempt in attempt order, each with its START, STOP at the clean end",
          one_file_per_attempt_with_its_start_and_end)

    def the_tensorboard_server_shows_the_same():
        # What the UI reads: `tensorboard --load_fast=true`, its Rust data server (tensorboard-data-server
        # from PyPI), over its HTTP API. Besides the START, it drops a tag's points from a step written
        # again onwards (without the START it too showed every step once).
        want = {tag: [(s, steps[s][key]) for s in sorted(steps)] for tag, key in TRAIN_TAGS.items()}
        want["train/mfu"] = [(s, steps[s]["mfu"]) for s in range(4, STEPS + 1)]
        for name in EVAL_SETS:
            want[f"eval/{name}/loss"] = sorted((step, loss) for (s, step), loss in evals.items() if s == name)
        want["eft/attempt"] = [(0, 1), (4, 2), (8, 2)]
        want["eft/world_size"] = [(0, 1), (4, 2), (8, 2)]
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        log = open(f"{WORK}/tensorboard-server.log", "w")
        server = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "tensorboard"), "--logdir", run_dir,
                                   "--host", "127.0.0.1", "--port", str(port), "--load_fast=true",
                                   "--reload_interval", "1"], stdout=log, stderr=subprocess.STDOUT)
        try:
            got, deadline = {}, time.time() + 60
            while time.time() < deadline:
                try:
                    for tag in want:
                        url = f"http://127.0.0.1:{port}/data/plugin/scalars/scalars?run=.&tag={urllib.parse.quote(tag)}"
                        got[tag] = [(step, value) for _, step, value in json.load(urllib.request.urlopen(url, timeout=5))]
                except OSError:
                    got = {}
                if got and all([s for s, _ in got[t]] == [s for s, _ in want[t]] for t in want):
                    break
                time.sleep(0.5)
            assert got, "the server never answered: " + open(f"{WORK}/tensorboard-server.log").read()[-2000:]
            for tag, points_wanted in want.items():
                assert [s for s, _ in got[tag]] == [s for s, _ in points_wanted], f"{tag}: {got[tag]}"
                for (step, value), (_, expected) in zip(got[tag], points_wanted):
                    assert value == f32(expected), f"{tag} at step {step}: {value} != float32({expected})"
        finally:
            server.terminate()
            server.wait(timeout=30)
            log.close()

    check("the TensorBoard server (its Rust data server, what the UI shows) has the same points",
          the_tensorboard_server_shows_the_same)

    def a_file_cut_mid_record_hides_nothing_after_it():
        # Attempt 1 killed in the middle of writing its step 5 (its last record cut short): TensorBoard
        # skips the torn record and goes on to attempt 2's file.
        cut_dir = f"{WORK}/tensorboard-cut"
        shutil.rmtree(cut_dir, ignore_errors=True)
        shutil.copytree(run_dir, cut_dir)
        first = os.path.join(cut_dir, sorted(os.listdir(cut_dir))[0])
        os.truncate(first, os.path.getsize(first) - 7)
        acc = accumulate(cut_dir)
        expect_points(acc, "train/loss", [(s, steps[s]["loss"]) for s in sorted(steps)])
        assert points(acc, "eft/attempt") == [(0, 1.0), (4, 2.0), (8, 2.0)], points(acc, "eft/attempt")

    check("a file cut short mid-record (a rank killed mid-write): TensorBoard reads on into the next",
          a_file_cut_mid_record_hides_nothing_after_it)

    def an_unusable_directory_warns_and_training_goes_on():
        blocker = f"{WORK}/not-a-dir"
        open(blocker, "w").close()
        spec_off = write_spec("tb-unusable", "", tensorboard=f"{blocker}/tb", cache=f"{ckpt}/data-cache")
        r, ev = train(spec_off, "unusable", 1)
        assert r.returncode == 0, r.stderr[-3000:]
        assert ev[-1]["event"] == "finished", ev[-1]
        warnings = tensorboard_warnings(r.stderr)
        assert len(warnings) == 1 and f"cannot create {blocker}/tb" in warnings[0], warnings

    check("an unusable tracking.tensorboard: one warning, the job finishes", an_unusable_directory_warns_and_training_goes_on)

    def a_write_failing_mid_run_warns_and_keeps_what_was_written():
        # The data caches exist (attempt 1 built them), so the event file is the only file this run
        # writes; a 1,000-byte file size limit fails one of its writes after a few steps (EFBIG, and
        # eft-train ignores SIGXFSZ as for a full disk). No EFT_EVENTS_FD file: it would hit the limit.
        tb = f"{WORK}/tb-limited"
        spec_limited = write_spec("tb-limited", "", tensorboard=tb, cache=f"{ckpt}/data-cache")
        limit = 1000
        r = subprocess.run([EFT, "train", "--config", spec_limited, "--threads", "1"], capture_output=True, text=True,
                           preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
        assert r.returncode == 0, r.stderr[-3000:]
        assert f"step {STEPS}/{STEPS}" in r.stdout, r.stdout[-2000:]
        warnings = tensorboard_warnings(r.stderr)
        assert len(warnings) == 1 and "File too large" in warnings[0], warnings
        files = os.listdir(tb)
        assert len(files) == 1 and os.path.getsize(os.path.join(tb, files[0])) <= limit, files
        losses = [float(line.split("| loss ")[1].split()[0]) for line in r.stdout.splitlines() if line.startswith("step ")]
        got = points(accumulate(tb), "train/loss")
        assert 1 <= len(got) < STEPS, got
        assert [s for s, _ in got] == list(range(1, len(got) + 1)), got
        for step, value in got:  # the progress line prints 4 decimals
            assert abs(value - losses[step - 1]) <= 5e-5, (step, value, losses[step - 1])

    check("a write failing mid-run (file size limit): one warning, the job finishes, TensorBoard reads what was written",
          a_write_failing_mid_run_warns_and_keeps_what_was_written)

    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
