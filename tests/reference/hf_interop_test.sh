#!/usr/bin/env bash
# eft's outputs in the Hugging Face stack, on the CPU: a model eft-train fine-tuned loads in
# transformers with every weight matched (transformers_loads.py), and a LoRA adapter it trained loads
# in peft and gives the logits of the model eft merged (peft_matches_merged.py). bench/gpu/run.sh runs
# the same with the training on a GPU.
#
# Usage: hf_interop_test.sh EFT_TRAIN PYTHON WORK_DIR [DEVICE]
set -uo pipefail
train=$1 py=$2 work=$3 device=${4:-cpu}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
source "$here/check_lib.sh"

"$train" init-model --arch llama --hidden 64 --layers 2 --heads 4 --kv-heads 2 --intermediate 160 \
  --vocab-size 512 --dtype bfloat16 --seed 9 --out "$work/base" >"$work/init.log" 2>&1 ||
  { cat "$work/init.log"; echo "0 passed, 2 failed"; exit 1; }
"$py" - "$work/data.jsonl" <<'PY'
import json, random, sys
random.seed(0)
with open(sys.argv[1], "w") as f:
    for i in range(32):
        ids = [random.randrange(3, 512) for _ in range(64 if i % 2 == 0 else 21)]
        f.write(json.dumps({"input_ids": ids, "labels": [-100] * (len(ids) // 4) + ids[len(ids) // 4:]}) + "\n")
PY
spec() {  # name extra-training-fields
  cat <<YAML
name: $1
model: $work/base
data: {train: $work/data.jsonl, max_seq_len: 128}
training: {global_batch_size: 8, micro_batch_size: 4, lr: 1.0e-2, precision: bf16, device: $device, epochs: 100$2}
checkpoint: {merge_lora: $3}
YAML
}
spec full "" false >"$work/full.yaml"
spec lora ", lora: {r: 8, alpha: 16, target_modules: all-linear}" true >"$work/lora.yaml"

fine_tuned_loads() {
  "$train" train --config "$work/full.yaml" --nproc 1 --max-steps 3 --output-dir "$work/full-out" &&
    "$py" "$here/transformers_loads.py" "$work/full-out"
}
adapter_matches_merged() {
  "$train" train --config "$work/lora.yaml" --nproc 1 --max-steps 6 --output-dir "$work/lora-out" &&
    "$py" "$here/peft_matches_merged.py" "$work/base" "$work/lora-out" "$work/lora-out/merged"
}
check transformers-loads-eft-output fine_tuned_loads
check peft-adapter-matches-eft-merged adapter_matches_merged
echo "$passed passed, $failed failed"
((failed == 0))
