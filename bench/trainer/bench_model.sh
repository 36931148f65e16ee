# Sourced by the trainer benchmarks that compare on one model (compare.sh, lora_bench.sh):
# write_bench_model TRAIN DIR writes the ~20M-parameter Llama (hidden 512, 4 layers, vocabulary
# 16,000, tied embeddings, fp32) to DIR/model and 256 random 512-token rows to DIR/data.jsonl.
write_bench_model() {
  "$1" init-model --arch llama --hidden 512 --layers 4 --heads 8 --kv-heads 4 --intermediate 1376 \
    --vocab-size 16000 --tie-embeddings --dtype float32 --seed 1 --out "$2/model" >/dev/null
  write_random_rows "$2/data.jsonl" 16000 512
}

# write_random_rows FILE VOCAB SEQ: 256 rows of SEQ random token ids below VOCAB (seeded).
write_random_rows() {
  /usr/bin/python3 - "$@" <<'PY'
import json, random, sys
random.seed(0)
vocab, seq = int(sys.argv[2]), int(sys.argv[3])
with open(sys.argv[1], "w") as f:
    for _ in range(256):
        f.write(json.dumps({"input_ids": [random.randrange(1, vocab) for _ in range(seq)]}) + "\n")
PY
}
