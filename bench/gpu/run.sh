#!/usr/bin/env bash
# Everything the GPU machine is for, in one device call (docs/gpu.md):
#   1. build eft-train and its tests against the machine's PyTorch (CUDA, NCCL), with the Debian
#      libraries it lacks unpacked from .gpu-deps (scripts/gpu-deps.sh, carried with the call);
#   2. run the trainer's tests there (CPU code paths, as in CI: no GPU visible to them);
#   3. train the same tiny model on the GPU and on the CPU (fp32) and compare every step's loss;
#      bf16 on the GPU against fp32; packed rows (masked attention) and unpacked rows (flash);
#   4. write the Hugging Face reference fixtures with transformers (tests/reference/hf_fixtures.py)
#      and check eft's model against them at once; transformers loads eft's output directory; a
#      LoRA adapter trained on the GPU, loaded with peft, gives the logits of eft's merged model;
#   5. benchmark tokens/s, MFU and GPU memory for a 0.35B-parameter model.
# Full logs and the fixtures go to $OUT; a short table is printed last. Each part runs even when an
# earlier one failed, as far as what it needs exists.
#
# Usage, from this machine:   scripts/gpu-deps.sh
#   device run: command "bench/gpu/run.sh", carry [".gpu-deps"]
# Options (environment): EFT_GPU_PARTS="build tests compare fixtures bench" (default: all),
#   EFT_GPU_BENCH_STEPS=12, EFT_GPU_JOBS=$(nproc). For checking this script on a machine without a
#   GPU: EFT_GPU_DEVICE=cpu (the "GPU" runs use the CPU) and EFT_GPU_BUILD=an existing build, or
#   for the build itself EFT_GPU_PYTHON=.venv/bin/python (the project's PyTorch: the build CI makes).
# The machine's own PyTorch is found through its python3 (cmake/EftTorch.cmake, -DEFT_PYTHON).
set -uo pipefail

src=$(pwd)
out=${OUT:-$src/gpu-out}
mkdir -p "$out"
parts=${EFT_GPU_PARTS:-build tests compare fixtures bench}
jobs=${EFT_GPU_JOBS:-$(nproc)}
build=${EFT_GPU_BUILD:-$src/build-gpu}
gpu=${EFT_GPU_DEVICE:-cuda}
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
  part tests env CUDA_VISIBLE_DEVICES= ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 600
fi

# ---- 3. GPU against CPU ------------------------------------------------------------------------
make_data() {  # dir vocab n len
  $py - "$1/data.jsonl" "$2" "$3" "$4" <<'PY'
import json, random, sys
path, vocab, n, length = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
random.seed(0)
with open(path, "w") as f:
    for i in range(n):
        k = length if i % 2 == 0 else length // 3  # short rows make packing and padding matter
        ids = [random.randrange(3, vocab) for _ in range(k)]
        f.write(json.dumps({"input_ids": ids, "labels": [-100] * (k // 4) + ids[k // 4:]}) + "\n")
PY
}
train_run() {  # name device precision packing steps -> $work/NAME.events
  local name=$1 device=$2 precision=$3 packing=$4 steps=$5
  cat >"$work/$name.yaml" <<YAML
name: $name
model: $work/model
data: {train: $work/data.jsonl, max_seq_len: 256, packing: $packing}
training: {global_batch_size: 8, micro_batch_size: 2, lr: 1.0e-3, precision: $precision, device: $device,
           activation_checkpointing: full, epochs: 100, seed: 7}
YAML
  EFT_EVENTS_FD=3 "$train" train --config "$work/$name.yaml" --nproc 1 --max-steps "$steps" \
    >"$out/train-$name.log" 2>&1 3>"$work/$name.events"
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
  train_run cpu-fp32 cpu fp32 true 20 && train_run gpu-fp32 "$gpu" fp32 true 20 || return 1
  grep -h "threads per rank" "$out/train-gpu-fp32.log" | head -1
  # fp32 on both; cuBLAS and the CPU BLAS sum in different orders (TF32 stays off: LibTorch's
  # default for matmuls), so losses drift apart by float rounding compounded over 20 Adam steps.
  compare_losses gpu-fp32 cpu-fp32 1e-3 "GPU fp32 vs CPU fp32 (packed, masked attention)"
}
gpu_variants() {
  train_run gpu-bf16 "$gpu" bf16 true 20 && train_run gpu-fp32-unpacked "$gpu" fp32 false 20 &&
    train_run cpu-fp32-unpacked cpu fp32 false 20 || return 1
  compare_losses gpu-bf16 gpu-fp32 1e-2 "GPU bf16 vs GPU fp32" || return 1
  # Unpacked rows: every row one document, so the GPU takes the is_causal SDPA (flash) path.
  compare_losses gpu-fp32-unpacked cpu-fp32-unpacked 1e-3 "GPU SDPA (unpacked) vs CPU"
}
if want compare && [[ -x $train ]]; then
  part gpu-vs-cpu gpu_vs_cpu
  part gpu-variants gpu_variants
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
bench() {
  local steps=${EFT_GPU_BENCH_STEPS:-12}
  # EFT_GPU_BENCH_MODEL / _SEQ: a smaller model for checking this script without a GPU.
  local model=${EFT_GPU_BENCH_MODEL:---arch llama --hidden 1024 --layers 24 --heads 16 --kv-heads 8 --intermediate 2816 --vocab-size 32000}
  local seq=${EFT_GPU_BENCH_SEQ:-2048}
  # shellcheck disable=SC2086  # the model's flags, split on purpose
  "$train" init-model $model --dtype bfloat16 --seed 1 --out "$work/model-bench" >/dev/null || return 1
  local vocab
  vocab=$($py -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$work/model-bench/config.json")
  make_data "$work" "$vocab" 512 "$seq"
  echo "| run | precision | activation ckpt | tokens/s | s/step | MFU | peak GPU MiB |"
  echo "|---|---|---|---|---|---|---|"
  for ac in full none; do
    cat >"$work/bench-$ac.yaml" <<YAML
name: bench
model: $work/model-bench
data: {train: $work/data.jsonl, max_seq_len: $seq}
training: {global_batch_size: 16, micro_batch_size: 4, lr: 1.0e-4, precision: bf16, device: $gpu,
           activation_checkpointing: $ac, epochs: 100}
YAML
    : >"$work/mem-$ac.csv"
    local smi=
    if command -v nvidia-smi >/dev/null; then
      nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$work/mem-$ac.csv" &
      smi=$!
    fi
    EFT_EVENTS_FD=3 "$train" train --config "$work/bench-$ac.yaml" --nproc 1 --max-steps "$steps" \
      --peak-tflops 989 >"$out/bench-$ac.log" 2>&1 3>"$work/bench-$ac.events"
    local rc=$?
    [[ -n $smi ]] && kill "$smi" 2>/dev/null
    [[ $rc == 0 ]] || return 1
    $py - "$work/bench-$ac.events" "$work/mem-$ac.csv" "$ac" "$(grep -o 'eft-train: [a-z0-9]* [0-9.]*M parameters' "$out/bench-$ac.log" | head -1 | cut -d' ' -f2-4)" "$seq" <<'PY'
import json, statistics, sys
steps = [e for e in map(json.loads, open(sys.argv[1])) if e.get("event") == "step"][2:]
mem = max((int(l) for l in open(sys.argv[2]) if l.strip().isdigit()), default=None)
mfu = statistics.median(e.get("mfu", 0) for e in steps)
print(f"| {sys.argv[4]}, seq {sys.argv[5]}, batch 16 | bf16 | {sys.argv[3]} | {statistics.median(e['tokens_per_s'] for e in steps):,.0f} | "
      f"{statistics.median(e['seconds'] for e in steps):.2f} | {mfu:.1%} | {'n/a' if mem is None else f'{mem:,}'} |")
PY
  done
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
[[ -f $out/bench.log ]] && grep '^|' "$out/bench.log"
! grep -q FAILED "$out/summary.md"
