#!/usr/bin/env bash
# slurm/eft-cluster.sbatch on a real (one-node) Slurm: munged, slurmctld and slurmd started here.
#  1. eft-train fine-tunes a tiny model: the Slurm job COMPLETES and the eft job SUCCEEDED.
#  2. A long job is requeued (scontrol requeue) after its first checkpoint: the requeued allocation
#     continues the same eft job (same id, attempt 2, resumed from the checkpoint) to SUCCEEDED.
#  3. A long job is scancel'ed: the controller's database records the eft job as CANCELLED.
#  4. eft-workers.sbatch: a worker allocation joins a controller running outside Slurm, runs a job,
#     and leaves the cluster when scancel ends the allocation.
# Usage: check_eft_cluster.sh SOURCE_DIR BUILD_DIR   (root; exits 77 when Slurm is not installed)
set -euo pipefail
src=$1 build=$2
for tool in slurmctld slurmd munged sbatch; do
  command -v "$tool" >/dev/null || { echo "SKIPPED: $tool not installed (scripts/install-deps.sh installs Slurm)"; exit 77; }
done
[[ $(id -u) == 0 ]] || { echo "SKIPPED: the Slurm test runs the daemons as root"; exit 77; }
# shellcheck source=slurm_cluster.sh
source "$src/tests/slurm/slurm_cluster.sh"
work=$(mktemp -d /tmp/eft-slurm-XXXXXX)
chmod 755 "$work"
ctl_pid=
cleanup() {
  rc=$?
  [[ $rc == 0 ]] || true
  squeue -h -o %i 2>/dev/null | xargs -r scancel --quiet --full 2>/dev/null || true
  if [[ -n $ctl_pid ]]; then kill -9 "$ctl_pid" 2>/dev/null || true; fi
  slurm_stop
  if [[ $rc == 0 && -z ${EFT_KEEP:-} ]]; then rm -rf "$work"; else echo "kept for inspection: $work" >&2; fi
}
trap cleanup EXIT
slurm_start "$work/slurm"
export PATH=$build/trainer:$PATH
fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/*.out "$work"/state/*/controller.log "$work"/state/*/worker-*.log; do
    [[ -f $f ]] && { echo "--- $f" >&2; tail -30 "$f" >&2; }
  done
  exit 1
}
submit() {  # submit NAME SPEC -> Slurm job id
  (cd "$work" && sbatch --parsable --job-name="$1" --output="$work/$1-%j.out" \
     --export="ALL,EFT_PORT=$(free_port),EFT_HEARTBEAT_TIMEOUT=3" \
     "$work/eft-cluster.sbatch" "$2")
}
wait_state() {  # wait_state JOB STATE SECONDS
  local s=
  for _ in $(seq $(($3 * 5))); do
    s=$(slurm_job_state "$1")
    [[ $s == "$2" ]] && return 0
    case $s in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL) break ;; esac
    sleep 0.2
  done
  fail "Slurm job $1 is ${s:-gone}, expected $2"
}
# The programs live in three build folders; eft-cluster.sbatch takes one EFT_BIN_DIR.
mkdir -p "$work/bin"
ln -s "$build/controller/eft-controller" "$build/worker/eft-worker" "$build/cli/eftctl" "$work/bin/"
sed "s|^bin=.*|bin=$work/bin/|" "$src/slurm/eft-cluster.sbatch" >"$work/eft-cluster.sbatch"
grep -q "^bin=$work/bin/" "$work/eft-cluster.sbatch" || fail "could not point the script at the build"
mkdir -p "$work/state"

# Inspect a finished run's database: a controller on loopback, eftctl job get.
eft_state() {  # eft_state STATE_DIR JOB_ID -> state
  local port
  port=$(free_port)
  "$build/controller/eft-controller" --db "$1/eft.db" --listen "127.0.0.1:$port" >"$work/inspect.log" 2>&1 &
  ctl_pid=$!
  local out=
  for _ in $(seq 50); do
    out=$("$build/cli/eftctl" --controller "127.0.0.1:$port" -o json job get "$2" 2>/dev/null) && break
    sleep 0.1
  done
  kill -9 "$ctl_pid" 2>/dev/null || true
  wait "$ctl_pid" 2>/dev/null || true
  ctl_pid=
  echo "$out" | sed -n 's/^ "state": *"\([^"]*\)".*/\1/p' | head -1
}
attempts() { grep -c '"attempt"' "$1" || true; }

# 1. eft-train on a tiny model.
"$build/trainer/eft-train" init-model --arch llama --hidden 32 --layers 1 --heads 2 --intermediate 48 \
  --vocab-size 64 --dtype float32 --out "$work/model" >/dev/null
python3 -c '
import json, random
r = random.Random(1)
with open("'"$work"'/data.jsonl", "w") as f:
    for _ in range(32):
        ids = [r.randrange(1, 64) for _ in range(r.randrange(6, 20))]
        f.write(json.dumps({"input_ids": ids}) + "\n")'
cat >"$work/train.yaml" <<YAML
name: slurm-sft
model: $work/model
data: {train: $work/data.jsonl, max_seq_len: 32}
training: {global_batch_size: 8, micro_batch_size: 2, lr: 0.001, precision: fp32, epochs: 1}
checkpoint: {dir: $work/ckpt-sft, every_steps: 2}
resources: {nodes: {min: 1, max: 1}, gpus_per_node: 1}
YAML
job=$(EFT_STATE_DIR=$work/state/sft submit sft "$work/train.yaml")
echo "run 1: Slurm job $job (eft-train) ($SECONDS s)"
wait_state "$job" COMPLETED 180
grep -q "ended: SUCCEEDED" "$work/sft-$job.out" || fail "run 1: no SUCCEEDED in the job output"
[[ $(eft_state "$work/state/sft" "$(cat "$work/state/sft/job.id")") == JOB_STATE_SUCCEEDED ]] ||
  fail "run 1: the controller's database does not say SUCCEEDED"
echo "run 1: COMPLETED, eft job SUCCEEDED ($SECONDS s)"

# 2 and 3: the test workload, 60 steps of 100 ms, a checkpoint every 5.
long_spec() {  # long_spec NAME
  cat >"$work/$1.yaml" <<YAML
name: $1
command: [$build/tests/workload/eft-test-workload, --steps, "60", --step-ms, "100", --checkpoint-every, "5",
          --checkpoint-dir, $work/ckpt-$1, --result, $work/$1.result]
resources: {nodes: {min: 1, max: 1}, gpus_per_node: 1}
checkpoint: {dir: $work/ckpt-$1}
fault_tolerance: {stop_grace_seconds: 3}
YAML
}
wait_for_file() { for _ in $(seq 300); do compgen -G "$1" >/dev/null && return 0; sleep 0.1; done; fail "no $1"; }

long_spec requeue
job=$(EFT_STATE_DIR=$work/state/requeue submit requeue "$work/requeue.yaml")
echo "run 2: Slurm job $job (requeued once) ($SECONDS s)"
wait_state "$job" RUNNING 60
wait_for_file "$work/ckpt-requeue/*"
scontrol requeue "$job"
echo "run 2: requeued ($SECONDS s)"
# Slurm holds a requeued job back for the credential lifetime (cred_expire, 120 s by default;
# slurm_cluster.sh sets 15): the node keeps the old run's credential revoked that long, and a job
# started earlier (as `scontrol update StartTime=now` once did) is killed as "Job credential revoked".
s=
for _ in $(seq 100); do
  s=$(scontrol show job "$job" -o)
  [[ $s == *Reason=BeginTime* || $s == *JobState=RUNNING* ]] && break
  sleep 0.2
done
[[ $s == *Reason=BeginTime* || $s == *JobState=RUNNING* ]] || fail "run 2: the requeued job is not held for its BeginTime: $s"
wait_state "$job" COMPLETED 120
eft_id=$(cat "$work/state/requeue/job.id")
grep -q "eft job $eft_id (Slurm job $job, restart count 1)" "$work/requeue-$job.out" ||
  fail "run 2: the requeued allocation did not continue eft job $eft_id"
grep -q "ended: SUCCEEDED" "$work/requeue-$job.out" || fail "run 2: no SUCCEEDED after the requeue"
[[ $(eft_state "$work/state/requeue" "$eft_id") == JOB_STATE_SUCCEEDED ]] || fail "run 2: database state"
grep -q "attempt 2: world size 1 on .* resuming from $work/ckpt-requeue/step-" "$work/state/requeue/controller.log" ||
  fail "run 2: attempt 2 did not resume from a checkpoint"
# The workload sums its steps into its checkpoints: equal to the expected sum means no step was
# lost or run twice across the requeue.
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r["attempt"]==2 and r["acc"]==r["expected"] else 1)' \
  "$work/requeue.result" || fail "run 2: the result after the requeue is wrong: $(cat "$work/requeue.result")"
echo "run 2: requeued allocation continued eft job $eft_id to SUCCEEDED ($SECONDS s)"

long_spec cancel
job=$(EFT_STATE_DIR=$work/state/cancel submit cancel "$work/cancel.yaml")
echo "run 3: Slurm job $job (scancel) ($SECONDS s)"
wait_state "$job" RUNNING 60
wait_for_file "$work/state/cancel/job.id"
wait_for_file "$work/ckpt-cancel/*"
scancel "$job"
wait_state "$job" CANCELLED 60
for _ in $(seq 100); do kill -0 "$(pgrep -f "db $work/state/cancel/eft.db" | head -1)" 2>/dev/null || break; sleep 0.2; done
state=$(eft_state "$work/state/cancel" "$(cat "$work/state/cancel/job.id")")
[[ $state == JOB_STATE_CANCELLED ]] || fail "run 3: the controller recorded $state, not CANCELLED"
echo "run 3: scancel -> eft job CANCELLED in the controller's database ($SECONDS s)"

# 4. eft-workers.sbatch: an allocation whose worker joins a controller running outside Slurm.
port=$(free_port)
"$build/controller/eft-controller" --db "$work/service.db" --listen "127.0.0.1:$port" >"$work/service.log" 2>&1 &
service_pid=$!
trap 'kill -9 $service_pid 2>/dev/null || true; cleanup' EXIT
export EFT_CONTROLLER=127.0.0.1:$port
for _ in $(seq 50); do "$build/cli/eftctl" node list >/dev/null 2>&1 && break; sleep 0.1; done
job=$(cd "$work" && sbatch --parsable --output="$work/workers-%j.out" \
        --export="ALL,EFT_BIN_DIR=$build/worker" "$src/slurm/eft-workers.sbatch")
echo "run 4: Slurm job $job (eft-workers) ($SECONDS s)"
wait_state "$job" RUNNING 60
for _ in $(seq 100); do "$build/cli/eftctl" node list 2>/dev/null | grep -q READY && break; sleep 0.1; done
long_spec service
sed -i 's/"60"/"10"/' "$work/service.yaml"
"$build/cli/eftctl" job submit -f "$work/service.yaml" --follow >"$work/service-job.out" 2>&1 ||
  { cat "$work/service-job.out" >&2; fail "run 4: the job on the Slurm workers did not succeed"; }
scancel "$job"
wait_state "$job" CANCELLED 60
for _ in $(seq 100); do "$build/cli/eftctl" node list 2>/dev/null | grep -q READY || break; sleep 0.1; done
if "$build/cli/eftctl" node list | grep -q READY; then fail "run 4: the node is still READY after scancel"; fi
echo "run 4: the job ran on the Slurm workers; after scancel the node left ($SECONDS s)"
kill -9 "$service_pid" 2>/dev/null || true
