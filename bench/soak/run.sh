#!/usr/bin/env bash
# The fault soak (issue 30; docs/benchmarks.md, "Fault soak"): N trials on a local eft cluster (one
# controller, three workers on 127.0.0.1, one CPU slot each), each a small real eft-train job (a
# tiny Qwen3, 40 steps at world size up to 3, a sharded checkpoint every 5 steps) hit by one random
# fault at a random step. Every trial is checked the same way: the job ends SUCCEEDED, it reached
# its last step, and its final weights equal those of an uninterrupted run of the same job (bit for
# bit when every attempt ran at world size 3, within SOAK_TOLERANCE when the world size changed:
# docs/checkpoints.md, "Equal weights at another world size").
#
# Fault kinds (SOAK_KINDS to choose): worker_kill (kill -9 of a worker and its rank; the node comes
# back 3 s later), rank_kill (kill -9 of one rank alone), controller_kill (kill -9 of the controller,
# restarted 1 s later on the same database), worker_freeze (SIGSTOP of a worker past the heartbeat
# timeout, then SIGCONT), double_kill (a worker killed, and another while the recovery starts).
#
# Usage: bench/soak/run.sh [--trials N] [--seed S] [--build DIR]   (default 100 trials, seed 1, build)
# A seed reproduces the trials' faults and moments. Prints a table by fault kind, then
# "N passed, M failed" as its last line; exit 0 only when every trial passed. Everything lives in a
# temporary directory that is printed; every process started is stopped by PID on exit.
set -uo pipefail

trials=100
seed=1
build=build
while [[ $# -gt 0 ]]; do
  case $1 in
    --trials) trials=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "usage: $0 [--trials N] [--seed S] [--build DIR]" >&2; exit 2 ;;
  esac
done
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$build" && pwd)
py=${EFT_PYTHON:-$src/.venv/bin/python}
kinds=(${SOAK_KINDS:-worker_kill rank_kill controller_kill worker_freeze double_kill})
tolerance=${SOAK_TOLERANCE:-1e-4}
steps=40
work=$(mktemp -d /tmp/eft-soak-XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export EFT_CONTROLLER=127.0.0.1:$port
eftctl=$build/cli/eftctl
util="$py $src/bench/soak/soak_util.py"
RANDOM=$seed
declare -A worker_pid
controller_pid=

echo "soak: $trials trials, seed $seed, kinds ${kinds[*]}; files in $work"

cleanup() {
  local pids=("$controller_pid" "${worker_pid[@]}")
  for pid in "${pids[@]}"; do
    [[ -n $pid ]] && { kill -CONT "-$pid" 2>/dev/null; kill -9 "-$pid" 2>/dev/null || kill -9 "$pid" 2>/dev/null; }
  done
  wait 2>/dev/null
}
trap cleanup EXIT

start_controller() {
  echo "trainer_program: $build/trainer/eft-train" >"$work/controller.yaml"
  setsid "$build/controller/eft-controller" --listen "$EFT_CONTROLLER" --db "$work/controller.db" \
    --config "$work/controller.yaml" --heartbeat-interval 0.5 --heartbeat-timeout 2 >>"$work/controller.log" 2>&1 &
  controller_pid=$!
  disown "$controller_pid"  # killed on purpose: no "Killed" line from bash
  for _ in $(seq 100); do "$eftctl" node list >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "soak: the controller did not come up (controller.log)" >&2
  return 1
}

start_worker() {  # index
  CUDA_VISIBLE_DEVICES= setsid "$build/worker/eft-worker" --controller "$EFT_CONTROLLER" --name "node$1" \
    --slots 1 --work-dir "$work/work/node$1" --address 127.0.0.1 >>"$work/node$1.log" 2>&1 &
  worker_pid[$1]=$!
  disown "${worker_pid[$1]}"
}

ready_nodes() { "$eftctl" node list 2>/dev/null | grep -c READY; }

wait_nodes() {  # count
  for _ in $(seq 200); do [[ $(ready_nodes) -ge $1 ]] && return 0; sleep 0.1; done
  return 1
}

job() {  # id expr -> value of expr over the job's JSON (j), "" when not known
  "$eftctl" job get "$1" -o json >"$work/job.json" 2>/dev/null || { echo ""; return; }
  $util field "$work/job.json" "$2"
}

terminal() { [[ $1 == JOB_STATE_SUCCEEDED || $1 == JOB_STATE_FAILED || $1 == JOB_STATE_CANCELLED ]]; }

# ---- the model, the data and the job ----------------------------------------------------------------
"$build/trainer/eft-train" init-model --arch qwen3 --hidden 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 16 \
  --intermediate 128 --vocab-size 512 --tie-embeddings --dtype float32 --seed 1 --out "$work/model" >/dev/null || exit 1
python3 - "$work/sft.jsonl" <<'PY'
import json, random, sys
random.seed(0)
with open(sys.argv[1], "w") as f:
    for _ in range(96):
        a = random.randrange(10, 500)
        answer = [(a + k) % 500 + 10 for k in range(1, 13)]
        f.write(json.dumps({"input_ids": [1, 2, 3, a] + answer, "labels": [-100] * 4 + answer}) + "\n")
PY

submit() {  # name -> job id
  cat >"$work/$1.yaml" <<YAML
name: $1
model: $work/model
data: {train: $work/sft.jsonl, format: pretokenized, max_seq_len: 64, packing: false}
resources: {nodes: {min: 1, max: 3}, gpus_per_node: 1, resize_cooldown_seconds: 0}
training: {epochs: 10, global_batch_size: 24, micro_batch_size: 4, lr: 3.0e-4, precision: fp32, seed: 7}
checkpoint: {dir: $work/ckpt-$1, every_steps: 5, keep_last: 2}
fault_tolerance: {max_restarts: 10, stop_grace_seconds: 5}
env: {OMP_NUM_THREADS: "1"}
YAML
  "$eftctl" job submit -f "$work/$1.yaml" -o json 2>>"$work/submit.log" | $util field /dev/stdin 'j["id"]'
}

# Waits for job $1 to end (at most $2 s); prints its final state.
wait_end() {
  local state=
  for _ in $(seq $(($2 * 5))); do
    state=$(job "$1" 'j.get("state", "")')
    terminal "$state" && break
    sleep 0.2
  done
  echo "$state"
}

final_weights() { ls -dv "$work/ckpt-$1"/step-* 2>/dev/null | tail -1; }

start_controller || exit 1
for i in 0 1 2; do start_worker $i; done
wait_nodes 3 || { echo "soak: the workers did not register" >&2; exit 1; }

echo "soak: reference run (no fault)"
ref_id=$(submit reference)
ref_state=$(wait_end "$ref_id" 300)
ref_dir=$(final_weights reference)
if [[ $ref_state != JOB_STATE_SUCCEEDED || $ref_dir != */step-$steps ]]; then
  echo "soak: the reference run did not succeed ($ref_state, $ref_dir): nothing to compare with" >&2
  exit 1
fi

# ---- faults ---------------------------------------------------------------------------------------

# Sets `what` (for the log). Runs in this shell, not a subshell: the PIDs of what it restarts must
# reach worker_pid / controller_pid, or a later fault would miss the live process and start a second
# worker under the same name.
inject() {  # kind
  case $1 in
    worker_kill)
      local w=$((RANDOM % 3))
      kill -9 "-${worker_pid[$w]}" 2>/dev/null
      sleep 3; start_worker "$w"
      what="killed node$w" ;;
    rank_kill)
      # This cluster's ranks only: the children of its workers (another soak may run beside it).
      local ranks=() w pid=
      for w in 0 1 2; do mapfile -t -O "${#ranks[@]}" ranks < <(pgrep -P "${worker_pid[$w]}" -f "eft-train train"); done
      ((${#ranks[@]} > 0)) && pid=${ranks[$((RANDOM % ${#ranks[@]}))]}
      [[ -n $pid ]] && kill -9 "$pid"
      what="killed rank pid $pid" ;;
    controller_kill)
      kill -9 "-$controller_pid" 2>/dev/null
      sleep 1; start_controller >/dev/null
      what="killed the controller" ;;
    worker_freeze)
      local w=$((RANDOM % 3))
      kill -STOP "${worker_pid[$w]}"
      sleep 4; kill -CONT "${worker_pid[$w]}"
      what="froze node$w for 4 s (heartbeat timeout 2 s)" ;;
    double_kill)
      local a=$((RANDOM % 3)) b; b=$(((a + 1 + RANDOM % 2) % 3))
      kill -9 "-${worker_pid[$a]}" 2>/dev/null
      sleep 2.5  # the controller noticed (2 s) and is restarting the job
      kill -9 "-${worker_pid[$b]}" 2>/dev/null
      sleep 2; start_worker "$a"; start_worker "$b"
      what="killed node$a, then node$b during the recovery" ;;
  esac
}

results=$work/results.jsonl
: >"$results"
for trial in $(seq "$trials"); do
  kind=${kinds[$((RANDOM % ${#kinds[@]}))]}
  at=$((3 + RANDOM % 30))
  name=t$trial
  wait_nodes 3 >/dev/null
  id=$(submit "$name")
  [[ -z $id ]] && { echo "soak: trial $trial: submit failed (submit.log)" >&2; exit 1; }
  t_submit=$SECONDS
  step=0
  while [[ $((SECONDS - t_submit)) -lt 120 ]]; do
    step=$(job "$id" 'int(j.get("progress", {}).get("step", 0))')
    [[ ${step:-0} -ge $at ]] && break
    terminal "$(job "$id" 'j.get("state", "")')" && break
    sleep 0.2
  done
  attempt0=$(job "$id" 'j.get("attempt", 0)')
  t_fault=$(date +%s.%N)
  inject "$kind"
  # Recovered: a later step than the fault's reported again (by a new attempt, or, after a
  # controller kill, by the same one through the new controller).
  recovery=
  for _ in $(seq 900); do
    now_step=$(job "$id" 'int(j.get("progress", {}).get("step", 0))')
    state=$(job "$id" 'j.get("state", "")')
    if [[ -n $now_step && $now_step -gt ${step:-0} ]] || terminal "$state"; then
      recovery=$(python3 -c "import time; print(round(time.time() - $t_fault, 1))")
      break
    fi
    sleep 0.2
  done
  state=$(wait_end "$id" 300)
  worlds=$(job "$id" '",".join(str(a.get("worldSize", 0)) for a in j.get("attempts", []))')
  final=$(final_weights "$name")
  why=
  diff=
  passed=true
  if [[ $state != JOB_STATE_SUCCEEDED ]]; then
    passed=false; why="ended $state: $(job "$id" 'j.get("reason", "")')"
  elif [[ $final != */step-$steps ]]; then
    passed=false; why="final checkpoint $final, not step-$steps"
  else
    diff=$($util weights "$ref_dir/model.safetensors" "$final/model.safetensors")
    if [[ $worlds =~ ^(3,)*3$ ]]; then
      [[ $diff == 0.0 ]] || { passed=false; why="weights differ by $diff at world size 3 throughout"; }
    else
      python3 -c "import sys; sys.exit(0 if float('$diff') <= $tolerance else 1)" ||
        { passed=false; why="weights differ by $diff (> $tolerance) after world sizes $worlds"; }
    fi
  fi
  printf '{"trial": %d, "seed": %d, "kind": "%s", "at_step": %s, "what": "%s", "worlds": "%s", "weight_diff": %s, "recovery_s": %s, "passed": %s, "why": %s}\n' \
    "$trial" "$seed" "$kind" "${step:-0}" "$what" "$worlds" "${diff:-null}" "${recovery:-null}" "$passed" \
    "$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$why")" >>"$results"
  echo "trial $trial: $kind at step ${step:-0} ($what): $state, worlds $worlds, weights off by ${diff:-?}, recovered in ${recovery:-?} s: $([[ $passed == true ]] && echo passed || echo "FAILED: $why")"
done

$util table "$results"
! grep -q '"passed": false' "$results"
