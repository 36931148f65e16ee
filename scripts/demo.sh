#!/usr/bin/env bash
# The demo behind `make demo`: a local eft cluster (one controller, three workers, each a "node"
# on 127.0.0.1), a distributed c10d job on it, and a node failure in the middle of the job that
# the controller survives by restarting the job on the remaining nodes from its newest checkpoint.
#
# Usage: scripts/demo.sh [BUILD_DIR]. Everything lives under a temporary directory that is printed;
# every process started here is stopped by PID on exit.
set -euo pipefail

BUILD=${1:-build}
BUILD=$(cd "$BUILD" && pwd)
DEMO=$(mktemp -d /tmp/eft-demo-XXXXXX)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export EFT_CONTROLLER=127.0.0.1:$PORT
EFTCTL="$BUILD/cli/eftctl"
PIDS=()

cleanup() {
  for pid in "${PIDS[@]}"; do kill -9 "-$pid" 2>/dev/null || kill -9 "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "Starting eft-controller on $EFT_CONTROLLER (database $DEMO/controller.db)"
setsid "$BUILD/controller/eft-controller" --listen "$EFT_CONTROLLER" --db "$DEMO/controller.db" \
  --heartbeat-interval 0.5 --heartbeat-timeout 2 >"$DEMO/controller.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do "$EFTCTL" node list >/dev/null 2>&1 && break; sleep 0.1; done

say "Starting 3 eft-workers (node0, node1, node2), one CPU slot each"
for i in 0 1 2; do
  CUDA_VISIBLE_DEVICES= setsid "$BUILD/worker/eft-worker" --controller "$EFT_CONTROLLER" --name "node$i" \
    --slots 1 --work-dir "$DEMO/work/node$i" --address 127.0.0.1 >"$DEMO/node$i.log" 2>&1 &
  PIDS+=($!)
  eval "NODE${i}_PID=$!"
done
for _ in $(seq 50); do
  [ "$("$EFTCTL" node list | grep -c READY)" -eq 3 ] && break
  sleep 0.1
done
"$EFTCTL" node list

cat >"$DEMO/job.yaml" <<YAML
# A distributed job on 2..3 nodes. The rank program is eft's c10d test workload: every step is a
# Gloo all-reduce across all ranks; rank 0 checkpoints every 5 steps. Its result is 1+2+...+steps
# only if no step was lost or repeated across restarts.
name: demo
resources: {nodes: {min: 2, max: 3}, gpus_per_node: 1}
checkpoint: {dir: $DEMO/checkpoints}
fault_tolerance: {max_restarts: 3, stop_grace_seconds: 5}
command: [$BUILD/tests/workload/eft-test-workload, --steps, "40", --step-ms, "150",
          --checkpoint-every, "5", --checkpoint-dir, $DEMO/checkpoints, --result, $DEMO/result.json]
YAML
say "Submitting $DEMO/job.yaml"
cat "$DEMO/job.yaml"
"$EFTCTL" job submit -f "$DEMO/job.yaml" --follow >"$DEMO/follow.log" 2>&1 &
FOLLOW=$!
JOB=1

say "Waiting for the job to pass step 15, then killing node2 (kill -9: the node and its rank die)"
for _ in $(seq 300); do
  step=$("$EFTCTL" job get $JOB -o json | python3 -c 'import json,sys; print(json.load(sys.stdin).get("progress",{}).get("step",0))')
  [ "${step:-0}" -ge 15 ] && break
  sleep 0.1
done
"$EFTCTL" job list
kill -9 "$NODE2_PID"
echo "killed node2 at step $step; the controller notices within the heartbeat timeout (2 s)..."

wait "$FOLLOW" && rc=0 || rc=$?
say "Job progress as eftctl --follow printed it"
cat "$DEMO/follow.log"
say "eftctl job describe $JOB"
"$EFTCTL" job describe $JOB
say "eftctl node list"
"$EFTCTL" node list
say "Result"
cat "$DEMO/result.json"; echo
python3 - "$DEMO/result.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ok = r["acc"] == r["expected"]
print(f"sum of steps = {r['acc']:.0f}, expected {r['expected']:.0f}: "
      + ("no step lost or repeated across the restart" if ok else "MISMATCH"))
sys.exit(0 if ok else 1)
PY
say "Demo files (logs of every process): $DEMO"
exit $rc
