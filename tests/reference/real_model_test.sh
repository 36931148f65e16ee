#!/usr/bin/env bash
# eft on a real pretrained model, SmolLM2-135M-Instruct (scripts/real-model.sh), against Hugging Face
# transformers and peft (tests/reference/real_model.py does the comparing).
#
# Usage: real_model_test.sh EFT_TRAIN PYTHON WORK_DIR PART
#   generate  eft-train generate's greedy tokens equal transformers' on the model as it ships
#   outputs   fine-tuning it: eft's step losses equal an independent transformers + AdamW loop's; the
#             final model, a full checkpoint, a LoRA adapter and the merged model carry every file of
#             the model directory (the LoRA run's own data.chat_template as chat_template.jinja),
#             transformers renders conversations from them as from the input and generates what eft
#             generates, and peft's adapter gives the merged model's logits
set -uo pipefail
train=$1 py=$2 work=$3 part=$4
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export TQDM_DISABLE=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
rm -rf "$work" && mkdir -p "$work"
model=$("$root/scripts/real-model.sh") || { echo "scripts/real-model.sh failed"; echo "0 passed, 1 failed"; exit 1; }
source "$here/check_lib.sh"
reference() { "$py" "$here/real_model.py" "$@"; }

if [[ $part == generate ]]; then
  check greedy-generation-matches-transformers reference generate "$model" "$train"
fi

if [[ $part == outputs ]]; then
  # Full fine-tuning, fp32, every step one batch of all 8 conversations (so the loop below sees the
  # same batches whatever order eft's sampler takes), a full checkpoint at step 2.
  reference data "$model" "$work/data.jsonl" 8 >"$work/data.log" 2>&1 || cat "$work/data.log"
  lr=1.0e-4 steps=3
  cat >"$work/full.yaml" <<YAML
name: real-full
model: $model
data: {train: $work/data.jsonl, format: pretokenized, packing: false, max_seq_len: 128}
training: {global_batch_size: 8, micro_batch_size: 4, lr: $lr, precision: fp32, weight_decay: 0.01,
           max_grad_norm: 1.0, epochs: 100, schedule: {type: constant}}
checkpoint: {dir: $work/full-checkpoints, every_steps: 0, full_every_steps: 2}
YAML
  full_run() {
    EFT_EVENTS_FD=3 "$train" train --config "$work/full.yaml" --nproc 1 --max-steps $steps \
      --output-dir "$work/full-out" 3>"$work/full.events"
  }
  check fine-tune-full full_run
  check losses-match-transformers-adamw-loop reference loop "$model" "$work/data.jsonl" "$work/full.events" $lr $steps
  check final-model-complete reference outputs "$model" "$work/full-out"
  check full-checkpoint-complete reference outputs "$model" "$work/full-checkpoints/step-2"
  check fine-tuned-generation-matches-transformers reference generate "$work/full-out" "$train" 3

  # LoRA with a chat template of the run's own (ChatML without SmolLM2's default system prompt), on
  # conversations; the adapter and the merged model carry that template.
  cat >"$work/template.jinja" <<'JINJA'
{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}
JINJA
  "$py" - "$work/chat.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i, (c, cap) in enumerate([("Zembla", "Varno"), ("Orsinia", "Krasnoy"), ("Freedonia", "Fredville"),
                                  ("Genovia", "Pyrus")] * 2):
        f.write(json.dumps({"messages": [{"role": "user", "content": f"What is the capital of {c}?"},
                                         {"role": "assistant", "content": f"The capital of {c} is {cap}."}]}) + "\n")
PY
  cat >"$work/lora.yaml" <<YAML
name: real-lora
model: $model
data: {train: $work/chat.jsonl, max_seq_len: 64, chat_template: $work/template.jinja}
training: {global_batch_size: 8, micro_batch_size: 4, lr: 1.0e-3, precision: fp32, epochs: 100,
           lora: {r: 8, alpha: 16, target_modules: all-linear}}
checkpoint: {merge_lora: true}
YAML
  lora_run() { "$train" train --config "$work/lora.yaml" --nproc 1 --max-steps 3 --output-dir "$work/lora-out"; }
  check fine-tune-lora lora_run
  check adapter-complete reference outputs "$model" "$work/lora-out" "$work/template.jinja"
  check merged-model-complete reference outputs "$model" "$work/lora-out/merged" "$work/template.jinja"
  check peft-adapter-matches-eft-merged "$py" "$here/peft_matches_merged.py" "$model" "$work/lora-out" \
    "$work/lora-out/merged"
fi

echo "$passed passed, $failed failed"
((failed == 0 && passed > 0))
