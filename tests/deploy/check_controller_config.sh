#!/usr/bin/env bash
# deploy/config/controller.yaml (every option, commented) is accepted by eft-controller as it is:
# the controller starts with it and answers eftctl. Stopped by PID.
# Usage: check_controller_config.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
tmp=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$build/controller/eft-controller" --config "$src/deploy/config/controller.yaml" --listen "127.0.0.1:$port" \
  --db "$tmp/eft.db" >"$tmp/controller.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
  if "$build/cli/eftctl" --controller "127.0.0.1:$port" node list >/dev/null 2>&1; then
    echo "eft-controller runs with deploy/config/controller.yaml"
    exit 0
  fi
  if ! kill -0 "$pid" 2>/dev/null; then break; fi
  sleep 0.1
done
echo "eft-controller did not come up with deploy/config/controller.yaml:" >&2
cat "$tmp/controller.log" >&2
exit 1
