#!/usr/bin/env bash
# The long runs of fuzz/'s libFuzzer targets under ASan+UBSan (docs/fuzzing.md); `make fuzz` runs it.
#
# Usage: scripts/fuzz.sh [TARGET|all] [SECONDS]   (defaults: all, 60 s each; one target at a time)
#   e.g. scripts/fuzz.sh chat_template 1800
# Configures build-fuzz/ with clang-14 (-DEFT_FUZZ=ON) when it is not yet, builds the target(s),
# then runs each for SECONDS on its seeds (fuzz/corpus/<t>), its regressions (fuzz/regressions/<t>)
# and a working corpus kept between runs (build-fuzz/corpus/<t>, where new inputs go), with its
# dictionary (fuzz/dict/<t>.dict). A failing input is saved under build-fuzz/artifacts/<t>/: fix the
# parser, then copy the input into fuzz/regressions/<t>/ so that ctest's fuzz_replay.<t> keeps it.
# Each run's log is build-fuzz/logs/<t>.log; the summary line gives executions, cov and ft.
# Env: FUZZ_BUILD_DIR (build-fuzz), JOBS (build jobs, nproc), FUZZ_ARGS (more libFuzzer flags).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}
JOBS=${JOBS:-$(nproc)}
ALL=(rank_event job_spec model_config checkpoint_manifest controller_config http_target tokenizer_json chat_template
     safetensors_header tokenizer_config worker_config rest_body sentencepiece_model)
WHAT=${1:-all}
SECONDS_EACH=${2:-60}
if [[ $WHAT == all ]]; then TARGETS=("${ALL[@]}"); else TARGETS=("$WHAT"); fi
for t in "${TARGETS[@]}"; do
  [[ " ${ALL[*]} " == *" $t "* ]] || { echo "fuzz: unknown target '$t' (one of: ${ALL[*]}, all)" >&2; exit 2; }
done

# The longest input each target is given: a little above its largest seed.
max_len() {
  case $1 in
    tokenizer_json) echo 16384 ;;
    chat_template | safetensors_header | tokenizer_config | sentencepiece_model) echo 8192 ;;
    job_spec | controller_config | rest_body) echo 4096 ;;
    *) echo 2048 ;;
  esac
}

if ! compgen -G "/usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null; then
  echo "fuzz: clang-14's libFuzzer is missing: scripts/install-deps.sh installs it (libclang-rt-14-dev, libfuzzer-14-dev)" >&2
  exit 1
fi
if [[ ! -f $BUILD/build.ninja ]]; then
  CC=clang-14 CXX=clang++-14 cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEFT_FUZZ=ON >/dev/null
fi
cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]/%/_fuzz}"

failed=()
for t in "${TARGETS[@]}"; do
  work=$BUILD/corpus/$t
  artifacts=$BUILD/artifacts/$t/
  mkdir -p "$work" "$artifacts" "$BUILD/logs"
  dirs=("$work" "$ROOT/fuzz/corpus/$t")
  [[ -d $ROOT/fuzz/regressions/$t ]] && dirs+=("$ROOT/fuzz/regressions/$t")
  log=$BUILD/logs/$t.log
  echo "fuzz: $t for ${SECONDS_EACH} s (log: $log)"
  rc=0
  # shellcheck disable=SC2086
  "$BUILD/fuzz/${t}_fuzz" -max_total_time="$SECONDS_EACH" -max_len="$(max_len "$t")" -timeout=10 -rss_limit_mb=2048 \
    -dict="$ROOT/fuzz/dict/$t.dict" -artifact_prefix="$artifacts" -print_final_stats=1 ${FUZZ_ARGS:-} "${dirs[@]}" \
    >"$log" 2>&1 || rc=$?
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 | sed -E 's/^#[0-9]+[[:space:]]+DONE +//' || true)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  echo "fuzz: $t: ${execs:-?} executions; ${done_line:-stopped (exit $rc)}"
  if ((rc != 0)); then
    failed+=("$t")
    grep -E '^(==[0-9]+== ?ERROR|SUMMARY|FUZZ_CHECK|terminate called|  what\(\)|.*runtime error)' "$log" | head -5 | sed 's/^/  /'
    echo "  input(s): $(ls "$artifacts" | sed "s|^|$artifacts|" | tr '\n' ' ')"
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: findings in ${failed[*]}: fix them, then copy each input into fuzz/regressions/<target>/" >&2
  exit 1
fi
