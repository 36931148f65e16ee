#!/usr/bin/env bash
# Which fine-tuning recipe the demo uses, by measurement: SmolLM2-135M-Instruct (scripts/real-model.sh)
# taught the capitals of 24 invented countries (scripts/demo_data.py), each recipe scored on the
# held-out phrasings of them AND on real capitals the model already knew (bench/demo/score.py), with
# the eval loss of both eval sets (data.eval: new, known) before and after. One rank, 2 threads.
#
# Usage: bench/demo/recipes.sh [BUILD_DIR] [RECIPE...]
#   RECIPE: name:kind:lr:epochs:replay, kind full or lora (r 16, alpha 32), replay the phrasings per
#   replayed real country (0-5; scripts/demo_data.py)
#   (default: the set docs/benchmarks.md, "Demo recipe", records)
# Prints a markdown table; logs stay in the printed directory.
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd)
shift || true
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PY=$ROOT/.venv/bin/python
MODEL=$("$ROOT/scripts/real-model.sh")
DIR=$(mktemp -d /tmp/eft-demo-recipes-XXXXXX)
RECIPES=("$@")
((${#RECIPES[@]})) || RECIPES=(full-1e-4-replay2:full:1e-4:3:2 lora-2e-3:lora:2e-3:3:0 lora-2e-3-replay2:lora:2e-3:3:2
                              lora-2e-3-replay5:lora:2e-3:3:5 lora-1e-3-replay5:lora:1e-3:3:5)
echo "| recipe | steps | train s | eval new before -> after | eval known before -> after | new held-out right | known never trained right | known replayed right |"
echo "|---|---|---|---|---|---|---|---|"
for recipe in "${RECIPES[@]}"; do
  IFS=: read -r name kind lr epochs replay <<<"$recipe"
  data=$DIR/data-$replay
  [[ -d $data ]] || python3 "$ROOT/scripts/demo_data.py" "$data" --replay-phrasings "$replay" >/dev/null
  lora=""
  [[ $kind == lora ]] && lora=", lora: {r: 16, alpha: 32, target_modules: all-linear}"
  cat >"$DIR/$name.yaml" <<YAML
name: $name
model: $MODEL
data: {train: $data/train.jsonl, eval: [{name: new, path: $data/eval-new.jsonl}, {name: known, path: $data/eval-known.jsonl}], max_seq_len: 128}
training: {epochs: $epochs, global_batch_size: 8, micro_batch_size: 8, lr: $lr, weight_decay: 0.0,
           schedule: {type: cosine, warmup_ratio: 0.1}, eval_every_steps: 0$lora}
checkpoint: {merge_lora: $([[ $kind == lora ]] && echo true || echo false)}
YAML
  t0=$(date +%s.%N)
  EFT_EVENTS_FD=3 "$BUILD/trainer/eft-train" train --config "$DIR/$name.yaml" --nproc 1 --threads 2 \
    --output-dir "$DIR/$name-out" >"$DIR/$name.log" 2>&1 3>"$DIR/$name.events"
  t1=$(date +%s.%N)
  out=$DIR/$name-out
  [[ $kind == lora ]] && out=$out/merged
  TQDM_DISABLE=1 "$PY" "$HERE/score.py" "$out" "$data" >"$DIR/$name.score" 2>/dev/null
  python3 - "$DIR/$name.events" "$DIR/$name.score" "$name" "$t0" "$t1" <<'PY'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
score = json.loads(open(sys.argv[2]).read())
steps = max(e["step"] for e in events if e.get("event") == "step")
def curve(name):
    v = [e["loss"] for e in events if e.get("event") == "eval" and e.get("set") == name]
    return f"{v[0]:.3f} -> {v[-1]:.3f}"
print(f"| {sys.argv[3]} | {steps} | {float(sys.argv[5]) - float(sys.argv[4]):.0f} | {curve('new')} | {curve('known')} | "
      f"{score['new_held_out']} | {score['known_held_out']} | {score['known_replayed']} |")
PY
done
echo
echo "logs: $DIR"
