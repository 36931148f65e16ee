#!/usr/bin/env bash
# Control-plane benchmarks: node-loss detection/relaunch, planned resizes and controller throughput.
#
# Usage: bench/run_control_plane.sh [BUILD_DIR]        (default: build)
#   EFT_BENCH_RUNS=10      node-loss repetitions (the medians in docs/benchmarks.md use 10)
#   EFT_BENCH_SECONDS=10   length of each controller load phase
#   EFT_BENCH_WORKERS=1000 simulated workers for the heartbeat phases
#   EFT_BENCH_ONLY=loss|resize|load  run just one of the three programs
#   EFT_BENCH_RESIZE_INTERLEAVE=1  resize runs alternate fast heartbeats off/on (resize_bench --interleave)
# Builds the programs (and what they start: eft-controller, eft-worker, eft-test-workload, eft-train) with
# `cmake --build`, runs them, keeps their full output under BUILD_DIR/bench-results/<time>/ and ends
# with a summary table. Takes about 6-8 minutes. Everything runs on 127.0.0.1; nothing is left behind
# but the output files. The numbers depend on the machine and on what else runs: the script prints
# the load average before and after, and a load above about 1.5 (on 2 cores) skews the results.
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
RUNS=${EFT_BENCH_RUNS:-10}
PHASE_S=${EFT_BENCH_SECONDS:-10}
WORKERS=${EFT_BENCH_WORKERS:-1000}
ONLY=${EFT_BENCH_ONLY:-}
INTERLEAVE=${EFT_BENCH_RESIZE_INTERLEAVE:-0}

if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
targets=()
[[ -z "$ONLY" || "$ONLY" == load ]] && targets+=(controller_load_bench)
[[ -z "$ONLY" || "$ONLY" == loss ]] && targets+=(node_loss_bench)
[[ -z "$ONLY" || "$ONLY" == resize ]] && targets+=(resize_bench)
cmake --build "$BUILD_DIR" --target "${targets[@]}"

out="$BUILD_DIR/bench-results/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
export EFT_BUILD_DIR
EFT_BUILD_DIR=$(cd "$BUILD_DIR" && pwd)

machine="$(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)), \
$(awk '/MemTotal/ {printf "%.0f GB", $2 / 1048576}' /proc/meminfo) RAM, $(uname -sr)"
echo "machine: $machine"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
if awk -v l="$(cut -d' ' -f1 /proc/loadavg)" -v n="$(nproc)" 'BEGIN { exit !(l > 0.75 * n) }'; then
  echo "warning: the machine is busy (1-minute load above 0.75 x cores): the numbers will be skewed"
fi

if [[ -z "$ONLY" || "$ONLY" == loss ]]; then
  echo "== node loss ($RUNS runs) =="
  "$BUILD_DIR/bench/node_loss_bench" --runs "$RUNS" | tee "$out/node_loss.txt" ||
    echo "node_loss_bench: some runs failed (see above)"
fi
if [[ -z "$ONLY" || "$ONLY" == resize ]]; then
  echo "== planned resize ($RUNS runs) =="
  "$BUILD_DIR/bench/resize_bench" --runs "$RUNS" --interleave "$INTERLEAVE" 2>"$out/resize.log" | tee "$out/resize.txt" ||
    echo "resize_bench: some runs failed (see above and $out/resize.log)"
fi
if [[ -z "$ONLY" || "$ONLY" == load ]]; then
  echo "== controller load ($PHASE_S s per phase, $WORKERS simulated workers) =="
  "$BUILD_DIR/bench/controller_load_bench" --seconds "$PHASE_S" --workers "$WORKERS" --jobs "$WORKERS" \
    >"$out/controller_load.txt" || echo "controller_load_bench reported errors (see $out/controller_load.txt)"
  grep -v '^RESULT' "$out/controller_load.txt"
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg) (includes the benchmarks' own load)"

# Summary: pick the SUMMARY/RESULT lines the programs print.
summary() {  # metric field-name file
  [[ -f "$3" ]] || return 0
  awk -v m="$1" -v f="$2" '$1 == "SUMMARY" && $2 == m { for (i = 3; i <= NF; i++) { split($i, kv, "="); if (kv[1] == f) print kv[2] } }' "$3"
}
result() {  # name file
  [[ -f "$2" ]] || return 0
  awk -v n="$1" '$1 == "RESULT" && $2 == n { print $3 }' "$2"
}
loss="$out/node_loss.txt" load="$out/controller_load.txt" resize="$out/resize.txt"
{
  echo
  echo "summary ($machine; results in $out)"
  printf '%-44s %-28s %s\n' "metric" "measured" "target"
  if [[ -f "$loss" ]]; then
    printf '%-44s %-28s %s\n' "node loss: kill -> LOST (median of $RUNS)" \
      "$(summary detection_ms median "$loss") ms (max $(summary detection_ms max "$loss"))" "<= 3000 ms"
    printf '%-44s %-28s %s\n' "relaunch: LOST -> attempt 2 placed" \
      "$(summary relaunch_placed_ms median "$loss") ms (max $(summary relaunch_placed_ms max "$loss"))" ""
    printf '%-44s %-28s %s\n' "relaunch: LOST -> attempt 2 RUNNING" \
      "$(summary relaunch_running_ms median "$loss") ms (max $(summary relaunch_running_ms max "$loss"))" \
      "<= 2000 ms"
    printf '%-44s %-28s %s\n' "kill -> attempt 2 RUNNING" \
      "$(summary kill_to_running_ms median "$loss") ms (max $(summary kill_to_running_ms max "$loss"))" \
      "(torchrun ~15 s)"
  fi
  if [[ -f "$resize" ]]; then
    kinds=(shrink grow preempt)
    [[ "$INTERLEAVE" == 1 ]] && kinds+=(off_shrink off_grow off_preempt)
    for kind in "${kinds[@]}"; do
      label="shrink (drain --evict)"
      [[ $kind == grow ]] && label="grow (undrain)"
      [[ $kind == off_shrink ]] && label="fast heartbeats off: shrink"
      [[ $kind == off_grow ]] && label="fast heartbeats off: grow"
      [[ $kind == preempt ]] && label="preempt (submit of priority 5)"
      [[ $kind == off_preempt ]] && label="fast heartbeats off: preempt"
      printf '%-44s %-28s %s\n' "$label: -> stop checkpoint" \
        "$(summary "${kind}_checkpoint_ms" median "$resize") ms (max $(summary "${kind}_checkpoint_ms" max "$resize"))" ""
      printf '%-44s %-28s %s\n' "  -> old attempt ended" \
        "$(summary "${kind}_ended_ms" median "$resize") ms (max $(summary "${kind}_ended_ms" max "$resize"))" ""
      printf '%-44s %-28s %s\n' "  -> new attempt RUNNING" \
        "$(summary "${kind}_running_ms" median "$resize") ms (max $(summary "${kind}_running_ms" max "$resize"))" ""
      printf '%-44s %-28s %s\n' "  -> first step at the new size" \
        "$(summary "${kind}_first_step_ms" median "$resize") ms (max $(summary "${kind}_first_step_ms" max "$resize"))" ""
    done
  fi
  if [[ -f "$load" ]]; then
    printf '%-44s %-28s %s\n' "SubmitJob, 8 clients" \
      "$(result submit_per_s "$load")/s (p99 $(result submit_p99_ms "$load") ms)" ">= 1000/s"
    printf '%-44s %-28s %s\n' "  first second -> last full second" \
      "$(result submit_first_second "$load")/s -> $(result submit_last_full_second "$load")/s" ""
    printf '%-44s %-28s %s\n' "Heartbeat, $WORKERS workers at 1 Hz" \
      "$(result paced_per_s "$load")/s (p99 $(result paced_p99_ms "$load") ms)" "1000/s, p99 < 20 ms"
    printf '%-44s %-28s %s\n' "  same, each with an 8-rank job" \
      "$(result active_per_s "$load")/s (p99 $(result active_p99_ms "$load") ms)" ""
    printf '%-44s %-28s %s\n' "Heartbeat, saturated" \
      "$(result saturate_per_s "$load")/s (p99 $(result saturate_p99_ms "$load") ms)" ""
    printf '%-44s %-28s %s\n' "  same, each with an 8-rank job" \
      "$(result saturate_active_per_s "$load")/s (p99 $(result saturate_active_p99_ms "$load") ms)" ""
  fi
} | tee "$out/summary.txt"
