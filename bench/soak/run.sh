#!/usr/bin/env bash
# The fault soak (issue 30; docs/benchmarks.md, "Fault soak"): N trials on a local eft cluster (one
# controller, three workers on 127.0.0.1, one CPU slot each), each a small real eft-train job (a
# tiny Qwen3, 40 steps at world size up to 3, each paced to ~0.14 s, a sharded checkpoint every 5
# steps) hit by one random fault at a random step. Every trial is checked the same way: the job ends SUCCEEDED, it reached
# its last step, and its final weights equal those of an uninterrupted run of the same job (bit for
# bit when every attempt ran at world size 3, within SOAK_TOLERANCE when the world size changed:
# docs/checkpoints.md, "Equal weights at another world size").
#
# Fault kinds (SOAK_KINDS to choose): worker_kill (kill -9 of a worker and its rank; the node comes
# back 3 s later), rank_kill (kill -9 of one rank alone), controller_kill (kill -9 of the controller,
# restarted 1 s later on the same database; when the workers then go unanswered for more than the
# 2 s heartbeat timeout, their leases run out and the job restarts from its checkpoint instead of
# going on: docs/architecture.md, "Lease"), worker_freeze (SIGSTOP of a worker past the heartbeat
# timeout, then SIGCONT; its ranks train on), node_freeze (the same stop of the worker and its ranks
# together: a hung host), double_kill (a worker killed, and another while the recovery starts),
# node_loss_controller_kill (a worker killed, and the controller while it is declaring the node
# lost), resize_kill (a node drained with --evict, i.e. a planned shrink, undrained 3 s later so the
# job grows back, and a worker or the controller killed during the shrink or the grow), preempt_kill (a
# higher-priority 1-node job takes a node from it, and a worker or the controller is killed while
# it gives way), disk_full (the job's checkpoint dir is a small tmpfs, filled up at the fault's
# step: held until a save has failed, then freed, or held to the end; needs root for mount, and is
# left out with a note without it). A disk_full trial may also end FAILED, when the storage stayed
# full: then the reason must name it. Either way the job must have reported the failed save, no
# step-N.tmp may be left, and every committed checkpoint must verify. Every SUCCEEDED trial but
# disk_full's also checks the job's TensorBoard run against the controller's loss history.
#
# Usage: bench/soak/run.sh [--trials N] [--seed S] [--build DIR]   (default 100 trials, seed 1, build)
# Environment: SOAK_KINDS, SOAK_TOLERANCE, SOAK_STEP_PACE, SOAK_EPOCHS (10: 40 steps), SOAK_FAULT_FROM and
# SOAK_FAULT_SPAN (the fault's step: 3 + [0, 30)), SOAK_DISK_EVERY, SOAK_MEMORY_EVERY, SOAK_MAX_STEPS_LOST
# (below, where each is read).
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
kinds=(${SOAK_KINDS:-worker_kill rank_kill controller_kill worker_freeze node_freeze double_kill
  node_loss_controller_kill resize_kill preempt_kill disk_full})
tolerance=${SOAK_TOLERANCE:-1e-4}
# Each step is held this long (EFT_DEBUG_STALL=step, in the workers' environment): the tiny model
# steps in ~40 ms, so unpaced a job is over before most faults land. Pacing changes no weight.
pace=${SOAK_STEP_PACE:-0.1}
# 4 steps an epoch; the fault lands at a step drawn from SOAK_FAULT_FROM + [0, SOAK_FAULT_SPAN).
epochs=${SOAK_EPOCHS:-10}
steps=$((4 * epochs))
fault_from=${SOAK_FAULT_FROM:-3}
fault_span=${SOAK_FAULT_SPAN:-30}
# Disk checkpoints every SOAK_DISK_EVERY steps (default 5) and memory snapshots every
# SOAK_MEMORY_EVERY (default auto; docs/checkpoints.md, "Memory snapshots"). With SOAK_MAX_STEPS_LOST
# set, a trial of any kind but double_kill (two nodes lost within one recovery: no replica need
# survive) also fails when an attempt lost more steps than that: SOAK_DISK_EVERY=200
# SOAK_MAX_STEPS_LOST=1 is the soak of issue 48 (every recovery from the peers' memory).
disk_every=${SOAK_DISK_EVERY:-5}
memory_every=${SOAK_MEMORY_EVERY:-auto}
max_lost=${SOAK_MAX_STEPS_LOST:-}
work=$(mktemp -d /tmp/eft-soak-XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export EFT_CONTROLLER=127.0.0.1:$port
eftctl=$build/cli/eftctl
util="$py $src/bench/soak/soak_util.py"
RANDOM=$seed
declare -A worker_pid
controller_pid=

echo "soak: $trials trials, seed $seed, kinds ${kinds[*]}; files in $work"

mounts=()
# Memory snapshots in memory (tmpfs), as on a real node: on the soak's disk they would be written back
# and slow every fsync there, the controller's too.
shm=$(mktemp -d /dev/shm/eft-soak-XXXXXX 2>/dev/null || echo "$work/shm")
cleanup() {
  local pids=("$controller_pid" "${worker_pid[@]}")
  for pid in "${pids[@]}"; do
    [[ -n $pid ]] && { kill -CONT "-$pid" 2>/dev/null; kill -9 "-$pid" 2>/dev/null || kill -9 "$pid" 2>/dev/null; }
  done
  wait 2>/dev/null
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null; done
  rm -rf "$shm"
}
trap cleanup EXIT

# disk_full needs a small filesystem of its own: a tmpfs (root only).
if [[ " ${kinds[*]} " == *" disk_full "* ]]; then
  mkdir -p "$work/probe"
  if mount -t tmpfs -o size=1m tmpfs "$work/probe" 2>/dev/null; then
    umount "$work/probe"
  else
    echo "soak: cannot mount a tmpfs (not root?): leaving disk_full out"
    kinds=(${kinds[@]/disk_full/})
  fi
fi

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
  # Ranks inherit the worker's environment: the step pace reaches them this way (spec.env may not set EFT_*).
  CUDA_VISIBLE_DEVICES= EFT_DEBUG_STALL=step EFT_DEBUG_STALL_SECONDS=$pace setsid "$build/worker/eft-worker" --controller "$EFT_CONTROLLER" --name "node$1" \
    --slots 1 --work-dir "$work/work/node$1" --address 127.0.0.1 --snapshot-dir "$shm/node$1" \
    >>"$work/node$1.log" 2>&1 &
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
training: {epochs: $epochs, global_batch_size: 24, micro_batch_size: 4, lr: 3.0e-4, precision: fp32, seed: 7}
checkpoint: {dir: $work/ckpt-$1, every_steps: $disk_every, keep_last: 2, memory_every_steps: $memory_every}
fault_tolerance: {max_restarts: 10, stop_grace_seconds: 5}
env: {OMP_NUM_THREADS: "1"}
YAML
  "$eftctl" job submit -f "$work/$1.yaml" -o json 2>>"$work/submit.log" | $util field /dev/stdin 'j["id"]'
}

submit_priority() {  # name -> id of a 1-node job of priority 10 that runs 4 s
  cat >"$work/$1.yaml" <<YAML
name: $1
command: [/bin/sleep, "4"]
resources: {nodes: {min: 1, max: 1}, gpus_per_node: 1}
priority: 10
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
      kill -9 "-${worker_pid[$w]}" 2>/dev/null; rm -rf "$shm/node$w"  # its memory goes with it
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
    node_freeze)
      # The whole node stalls (a hung host): its worker and its ranks.
      local w=$((RANDOM % 3)) frozen=()
      mapfile -t frozen < <(pgrep -P "${worker_pid[$w]}" -f "eft-train train")
      frozen+=("${worker_pid[$w]}")
      kill -STOP "${frozen[@]}"
      sleep 4; kill -CONT "${frozen[@]}"
      what="froze node$w (worker and ranks) for 4 s" ;;
    double_kill)
      local a=$((RANDOM % 3)) b; b=$(((a + 1 + RANDOM % 2) % 3))
      kill -9 "-${worker_pid[$a]}" 2>/dev/null; rm -rf "$shm/node$a"
      sleep 2.5  # the controller noticed (2 s) and is restarting the job
      kill -9 "-${worker_pid[$b]}" 2>/dev/null; rm -rf "$shm/node$b"
      sleep 2; start_worker "$a"; start_worker "$b"
      what="killed node$a, then node$b during the recovery" ;;
    node_loss_controller_kill)
      local w=$((RANDOM % 3)) gap; gap=$(printf '1.%d' $((RANDOM % 10)))
      kill -9 "-${worker_pid[$w]}" 2>/dev/null; rm -rf "$shm/node$w"  # its memory goes with it
      sleep "$gap"  # the heartbeat timeout is 2 s: the controller is about to declare node$w lost
      kill -9 "-$controller_pid" 2>/dev/null
      sleep 1; start_controller >/dev/null
      sleep 1; start_worker "$w"
      what="killed node$w, then the controller ${gap} s later" ;;
    resize_kill)
      # A planned shrink (drain --evict), and back: the kill lands in the shrink or in the grow.
      local d=$((RANDOM % 3)) gap phase=$((RANDOM % 2)); gap=$(printf '0.%d' $((RANDOM % 10)))
      "$eftctl" node drain "node$d" --evict >/dev/null
      if ((phase == 0)); then
        sleep "$gap"; kill_one "$d"
        sleep 3; "$eftctl" node undrain "node$d" >/dev/null
        what="drained node$d (--evict), $killed ${gap} s into the shrink, undrained 3 s after"
      else
        # Undrained once the job runs on the other two, so it grows back onto node$d.
        for _ in $(seq 50); do
          [[ $(job "$id" 'j.get("state") == "JOB_STATE_RUNNING" and j.get("worldSize", 0) == 2') == True ]] && break
          sleep 0.2
        done
        "$eftctl" node undrain "node$d" >/dev/null
        sleep "$gap"; kill_one -1
        what="drained node$d (--evict), undrained once it ran at world size 2, $killed ${gap} s into the grow"
      fi ;;
    preempt_kill)
      local gap; gap=$(printf '%d.%d' $((RANDOM % 2)) $((RANDOM % 10)))
      hp_id=$(submit_priority "$name-hp")
      sleep "$gap"
      kill_one -1
      what="a priority-10 job took a node; $killed ${gap} s later" ;;
    disk_full)
      # Fill the tmpfs. Either free it as soon as rank 0 logs a failed save (its log, not the
      # relayed event: a save fails in a millisecond and the next comes 5 steps later), or never.
      local hold=$((RANDOM % 2)) fill="$work/ckpt-$name/filler"
      dd if=/dev/zero of="$fill" bs=64k 2>/dev/null
      if ((hold == 0)); then
        # Rank 0 logs "... checkpoint at step N not committed" for a save that failed on any rank.
        for i in $(seq 400); do  # 20 s
          cat "$work"/work/node*/logs/"$id"/attempt-*/rank-0.log 2>/dev/null |
            grep -q "checkpoint at step [0-9]* not committed" && break
          ((i % 20 == 0)) && terminal "$(job "$id" 'j.get("state", "")')" && break
          sleep 0.05
        done
        rm -f "$fill"; what="filled its checkpoint tmpfs until a save failed, then freed it"
      else
        what="filled its checkpoint tmpfs for good"
      fi ;;
  esac
}

# kill -9 of the controller or of a worker other than node$1 (-1: any), each restarted as after a
# crash; sets `killed`.
kill_one() {
  if ((RANDOM % 2)); then
    kill -9 "-$controller_pid" 2>/dev/null
    sleep 1; start_controller >/dev/null
    killed="killed the controller"
  else
    local w=$((RANDOM % 3))
    ((w == $1)) && w=$(((w + 1) % 3))
    kill -9 "-${worker_pid[$w]}" 2>/dev/null; rm -rf "$shm/node$w"  # its memory goes with it
    sleep 3; start_worker "$w"
    killed="killed node$w"
  fi
}

results=$work/results.jsonl
: >"$results"
for trial in $(seq "$trials"); do
  kind=${kinds[$((RANDOM % ${#kinds[@]}))]}
  at=$((fault_from + RANDOM % fault_span))
  # A resize or preemption takes seconds: started late, the job would end before it is over.
  [[ $kind == resize_kill || $kind == preempt_kill ]] && at=$((3 + at % 15))
  name=t$trial
  hp_id=
  wait_nodes 3 >/dev/null
  if [[ $kind == disk_full ]]; then
    # Room for the data cache, two sharded checkpoints and one being written (1.3 MB each here).
    mkdir -p "$work/ckpt-$name"
    mount -t tmpfs -o size=8m tmpfs "$work/ckpt-$name" || { echo "soak: trial $trial: mount failed" >&2; exit 1; }
    mounts+=("$work/ckpt-$name")
  fi
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
  # Steps trained again, the most any attempt lost, and where the attempts resumed from.
  lost=$(job "$id" 'max([int(a.get("stepsLost", 0)) for a in j.get("attempts", [])] or [0])')
  sources=$(job "$id" '",".join("memory" if a.get("resumeFrom", "").endswith(".snapshot") else ("disk" if a.get("resumeFrom") else "-") for a in j.get("attempts", [])[1:])')
  final=$(final_weights "$name")
  why=
  diff=
  passed=true
  reason=$(job "$id" 'j.get("reason", "")')
  if [[ $kind == disk_full ]]; then
    # Said what happened, left nothing half-written, and kept what it committed usable.
    failed_saves=$(job "$id" 'sum(e.get("type") == "checkpoint_failed" for e in j.get("events", []))')
    bad=$($util committed "$work/ckpt-$name")
    if [[ ${failed_saves:-0} -lt 1 ]]; then
      passed=false; why="no checkpoint_failed event"
    elif [[ -n $bad ]]; then
      passed=false; why=$bad
    elif [[ $state == JOB_STATE_FAILED && $reason == *"storage"*"full"* ]]; then
      state=FAILED_RIGHTLY  # the storage stayed full: the job stopped and said so
    fi
    what="$what; $failed_saves failed saves"
  fi
  if [[ -n $hp_id ]]; then
    hp_state=$(wait_end "$hp_id" 120)
    [[ $hp_state == JOB_STATE_SUCCEEDED ]] || { passed=false; why="the priority job ended $hp_state"; }
  fi
  if [[ $passed == false || $state == FAILED_RIGHTLY ]]; then
    :
  elif [[ -n $max_lost && $kind != double_kill && ${lost:-0} -gt $max_lost ]]; then
    passed=false; why="an attempt lost ${lost} steps (more than $max_lost; resumed from: $sources)"
  elif [[ $state != JOB_STATE_SUCCEEDED ]]; then
    passed=false; why="ended $state: $reason"
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
  # The job's TensorBoard run (<checkpoint.dir>/tensorboard, each attempt's rank 0 writes it) as
  # TensorBoard reads it: every step once, every point the controller stored there with its value, a
  # controller killed or not (docs/tracking.md). Not after a full disk: it turns TensorBoard off for
  # the attempt that hit it.
  if [[ $passed == true && $state == JOB_STATE_SUCCEEDED && $kind != disk_full ]]; then
    job "$id" 'j["id"]' >/dev/null
    tb=$($util tensorboard "$work/ckpt-$name/tensorboard" "$work/job.json" "$steps" 2>>"$work/tensorboard.log")
    [[ -n $tb ]] && { passed=false; why="TensorBoard: $tb"; }
  fi
  printf '{"trial": %d, "seed": %d, "kind": "%s", "at_step": %s, "what": "%s", "worlds": "%s", "weight_diff": %s, "recovery_s": %s, "steps_lost": %s, "resumed_from": "%s", "passed": %s, "why": %s}\n' \
    "$trial" "$seed" "$kind" "${step:-0}" "$what" "$worlds" "${diff:-null}" "${recovery:-null}" "${lost:-null}" "$sources" "$passed" \
    "$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$why")" >>"$results"
  echo "trial $trial: $kind at step ${step:-0} ($what): $state, worlds $worlds, weights off by ${diff:-?}, recovered in ${recovery:-?} s, ${lost:-?} steps lost (from ${sources:--}): $([[ $passed == true ]] && echo passed || echo "FAILED: $why")"
  # A failed trial's checkpoints stay for reading (unmounted on exit: copy them first).
  [[ $kind == disk_full && $passed == true ]] && umount "$work/ckpt-$name"
done

$util table "$results"
! grep -q '"passed": false' "$results"
