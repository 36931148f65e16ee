#!/usr/bin/env bash
# deploy/config/worker.yaml (every option, commented) is accepted by eft-worker: a controller on
# loopback, the worker started with the example file (its controller and directories pointed at
# this test's by flags, which must win over the file), and the node must register. Its commented
# `data_address` key is used, given an interface name (lo), which must become the node's data address
# (127.0.0.1, not --address's). A file with an unknown key must be refused. Everything stopped by PID.
# Usage: check_worker_config.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
tmp=$(mktemp -d)
cpid= wpid=
cleanup() {
  [ -n "$wpid" ] && kill -9 "$wpid" 2>/dev/null || true
  [ -n "$cpid" ] && kill -9 "$cpid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port) mport=$(free_port)
"$build/controller/eft-controller" --listen "127.0.0.1:$port" --db "$tmp/eft.db" >"$tmp/controller.log" 2>&1 &
cpid=$!
grep -q '^# data_address: ' "$src/deploy/config/worker.yaml" || { echo "worker.yaml documents no data_address" >&2; exit 1; }
sed 's/^# data_address: .*/data_address: lo/' "$src/deploy/config/worker.yaml" >"$tmp/worker.yaml"
"$build/worker/eft-worker" --config "$tmp/worker.yaml" --controller "127.0.0.1:$port" --address 192.0.2.1 \
  --name cfg-node --work-dir "$tmp/work" --snapshot-dir "$tmp/work/shm" --metrics "127.0.0.1:$mport" \
  >"$tmp/worker.log" 2>&1 &
wpid=$!
for _ in $(seq 100); do
  if "$build/cli/eftctl" --controller "127.0.0.1:$port" node list 2>/dev/null | grep -q cfg-node; then
    # The file's log_level and metrics settings took effect (metrics port overridden by the flag).
    python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=5)" "http://127.0.0.1:$mport/healthz" \
      || { echo "worker metrics not served" >&2; exit 1; }
    # data_address: lo is the interface's address, which rank traffic uses.
    "$build/cli/eftctl" --controller "127.0.0.1:$port" -o json node list >"$tmp/nodes.json"
    python3 -c "import json,sys; n=json.load(open(sys.argv[1]))['nodes'][0]; \
assert (n['address'], n.get('dataAddress')) == ('192.0.2.1', '127.0.0.1'), n" "$tmp/nodes.json" \
      || { echo "data_address: lo did not become the node's data address" >&2; exit 1; }
    printf 'controler: 127.0.0.1:1\n' >"$tmp/typo.yaml"
    if "$build/worker/eft-worker" --config "$tmp/typo.yaml" >"$tmp/typo.log" 2>&1; then
      echo "a worker.yaml with an unknown key was accepted" >&2
      exit 1
    fi
    grep -q controler "$tmp/typo.log" || { echo "the error does not name the unknown key:" >&2; cat "$tmp/typo.log" >&2; exit 1; }
    echo "eft-worker runs with deploy/config/worker.yaml (data_address: an interface) and refuses unknown keys"
    exit 0
  fi
  if ! kill -0 "$wpid" 2>/dev/null; then break; fi
  sleep 0.1
done
echo "eft-worker did not register with deploy/config/worker.yaml:" >&2
cat "$tmp/worker.log" >&2
exit 1
