#!/usr/bin/env bash
# eft-train throughput and memory on CPU: a ~20M-parameter Llama (tied embeddings) trained for a
# few steps at world size 1 and 2 on this machine, with the same global batch.
#
# Usage: bench/trainer/run.sh [BUILD_DIR] [STEPS]
# Prints a table of tokens/s (median over the measured steps, the first two are warm-up) and peak
# resident memory per rank; full logs stay in the printed temporary directory.
set -euo pipefail

BUILD=$(cd "${1:-build}" && pwd)
STEPS=${2:-8}
TRAIN="$BUILD/bin/eft-train"
[ -x "$TRAIN" ] || TRAIN="$BUILD/trainer/eft-train"
DIR=$(mktemp -d /tmp/eft-bench-trainer-XXXXXX)
PY=/usr/bin/python3

"$TRAIN" init-model --arch llama --hidden 512 --layers 4 --heads 8 --kv-heads 4 --intermediate 1376 \
  --vocab-size 16000 --tie-embeddings --dtype float32 --seed 1 --out "$DIR/model" >/dev/null
$PY - "$DIR/data.jsonl" <<'PY'
import json, random, sys
random.seed(0)
with open(sys.argv[1], "w") as f:
    for _ in range(256):
        ids = [random.randrange(1, 16000) for _ in range(512)]
        f.write(json.dumps({"input_ids": ids}) + "\n")
PY

run() {  # name nproc threads precision
  local name=$1 nproc=$2 threads=$3 precision=$4
  cat >"$DIR/$name.yaml" <<YAML
name: bench
model: $DIR/model
data: {train: $DIR/data.jsonl, max_seq_len: 512}
training: {global_batch_size: 8, micro_batch_size: 1, lr: 1.0e-4, precision: $precision,
           activation_checkpointing: full, epochs: 10}
YAML
  EFT_EVENTS_FD=3 "$TRAIN" train --config "$DIR/$name.yaml" --nproc "$nproc" --threads "$threads" \
    --max-steps "$STEPS" >"$DIR/$name.log" 2>&1 3>"$DIR/$name.events"
  $PY - "$DIR/$name.events" "$name" "$nproc" "$threads" "$precision" <<'PY'
import json, statistics, sys
events = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steps = [e for e in events if e["event"] == "step"][2:]
mem = [e for e in events if e["event"] == "memory"]
tps = statistics.median(e["tokens_per_s"] for e in steps)
sec = statistics.median(e["seconds"] for e in steps)
rss = max(e["peak_rss_bytes"] for e in mem) / 2**20
persist = max(e["persistent_bytes"] for e in mem) / 2**20
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {sys.argv[5]} | {tps:,.0f} | {sec:.2f} | {persist:.0f} | {rss:.0f} |")
PY
}

echo "model: $("$PY" -c "import json;c=json.load(open('$DIR/model/config.json'));print(c['hidden_size'],'hidden,',c['num_hidden_layers'],'layers, vocab',c['vocab_size'])"), seq 512, global batch 8 (4096 tokens/step), $STEPS steps"
echo
echo "| run | ranks | threads/rank | precision | tokens/s | s/step | params+grads+Adam MiB/rank | peak RSS MiB/rank |"
echo "|---|---|---|---|---|---|---|---|"
run w1-fp32 1 2 fp32
run w2-fp32 2 1 fp32
run w1-bf16 1 2 bf16
run w2-bf16 2 1 bf16
echo
echo "logs: $DIR"
