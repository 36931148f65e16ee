#!/usr/bin/env bash
# The GPU machines have LibTorch but no gRPC, SQLite or Boost (docs/architecture.md, "Trainer";
# docs/gpu.md), so eft-train and its tests must configure without the control plane:
# `cmake -DEFT_BUILD_CONTROL_PLANE=OFF` must succeed here (configure only; the build itself is the same sources CI builds), and nothing under
# trainer/ may include a control-plane dependency.
# Usage: check_trainer_only.sh SOURCE_DIR
set -euo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! cmake -S "$src" -B "$tmp/build" -G Ninja -DEFT_BUILD_CONTROL_PLANE=OFF >"$tmp/configure.log" 2>&1; then
  echo "the trainer-only configuration fails:" >&2
  grep -A12 "CMake Error" "$tmp/configure.log" >&2 || tail -30 "$tmp/configure.log" >&2
  exit 1
fi
ninja -C "$tmp/build" -t targets all >"$tmp/targets"
for target in eft-train eft_spm; do
  grep -q "^$target:" "$tmp/targets" || { echo "trainer-only build has no $target target" >&2; exit 1; }
done
if grep -qE "^(eft-controller|eft-worker|eftctl):" "$tmp/targets"; then
  echo "the trainer-only build still builds control-plane programs" >&2
  exit 1
fi
# Tests that start the controller or worker must not be registered where those are not built.
ctest --test-dir "$tmp/build" -N >"$tmp/ctest"
if grep -E "deploy\.(Systemd|Example|Dockerfile|KubernetesPods)|slurm\." "$tmp/ctest" >"$tmp/tests"; then
  echo "the trainer-only build registers tests that need the control plane:" >&2
  cat "$tmp/tests" >&2
  exit 1
fi
if grep -rnE '#include [<"](grpc|grpcpp|sqlite3|boost)[/.]' "$src/trainer" >"$tmp/includes"; then
  echo "trainer/ includes control-plane dependencies:" >&2
  cat "$tmp/includes" >&2
  exit 1
fi
echo "trainer-only configuration OK ($(grep -v '^cmake_' "$tmp/targets" | grep -cE '^[a-z_]+_test:') test programs)"
