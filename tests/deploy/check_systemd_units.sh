#!/usr/bin/env bash
# deploy/systemd units pass `systemd-analyze verify` with no complaint at all (it exits 0 on many
# parse warnings, so any output fails the test). The ExecStart paths point at this build's binaries,
# since verify checks that they are executable.
# Usage: check_systemd_units.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed "s|/usr/local/bin/eft-controller|$build/controller/eft-controller|" "$src/deploy/systemd/eft-controller.service" \
  >"$tmp/eft-controller.service"
sed "s|/usr/local/bin/eft-worker|$build/worker/eft-worker|" "$src/deploy/systemd/eft-worker.service" \
  >"$tmp/eft-worker.service"
# A unit with a mistake must be refused, or this test could not fail.
sed 's/KillMode=mixed/KillMode=bogus/' "$tmp/eft-worker.service" >"$tmp/broken.service"
if [ -z "$(SYSTEMD_LOG_LEVEL=warning systemd-analyze verify "$tmp/broken.service" 2>&1)" ]; then
  echo "systemd-analyze accepted a broken unit: this check cannot fail" >&2
  exit 1
fi
out=$(SYSTEMD_LOG_LEVEL=warning systemd-analyze verify "$tmp/eft-controller.service" "$tmp/eft-worker.service" 2>&1) || {
  echo "$out" >&2
  exit 1
}
if [ -n "$out" ]; then
  echo "systemd-analyze verify complained:" >&2
  echo "$out" >&2
  exit 1
fi
echo "eft-controller.service and eft-worker.service verified"
