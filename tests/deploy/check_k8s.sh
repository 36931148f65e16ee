#!/usr/bin/env bash
# k8s/: every overlay (and the base) renders with `kubectl kustomize`, and every object validates
# against the Kubernetes API schemas (npm kubernetes-models) plus cross-object checks
# (k8s_validate.mjs). Secrets an overlay expects to be created out of band are named here.
# A deliberately broken object must be rejected, so the check itself is known to work.
# Usage: check_k8s.sh SOURCE_DIR    (exit 77: npm registry unreachable, SKIPPED)
set -euo pipefail
src=$1
here=$(cd "$(dirname "$0")" && pwd)
set +e
modules=$("$src/scripts/npm-fixtures.sh")
rc=$?
set -e
if [[ $rc == 77 ]]; then echo "*** SKIPPED: npm registry unreachable, Kubernetes schemas unavailable ***"; exit 77; fi
[[ $rc == 0 ]] || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
to_json() { /usr/bin/python3 -c 'import json, sys, yaml; print(json.dumps([d for d in yaml.safe_load_all(sys.stdin) if d]))'; }
declare -A external=([base]="eft-auth" [dev]="" [production]="eft-auth eft-tls" [soperator]="eft-auth")
for overlay in base dev production soperator; do
  dir=$src/k8s/overlays/$overlay
  [[ $overlay == base ]] && dir=$src/k8s/base
  kubectl kustomize "$dir" >"$tmp/$overlay.yaml"
  to_json <"$tmp/$overlay.yaml" >"$tmp/$overlay.json"
  # shellcheck disable=SC2086
  node "$here/k8s_validate.mjs" "$modules" "$overlay" "$tmp/$overlay.json" ${external[$overlay]}
done
# The validator must fail on a wrong type and on a dangling reference.
python3 - "$tmp/dev.json" "$tmp/broken.json" <<'PY'
import json, sys
objs = json.load(open(sys.argv[1]))
for o in objs:
    if o["kind"] == "StatefulSet":
        o["spec"]["replicas"] = "one"
    if o["kind"] == "DaemonSet":
        o["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] = "nope"
json.dump(objs, open(sys.argv[2], "w"))
PY
if node "$here/k8s_validate.mjs" "$modules" broken "$tmp/broken.json" >"$tmp/broken.log" 2>&1; then
  echo "the validator accepted a broken render" >&2
  exit 1
fi
grep -q "replicas" "$tmp/broken.log" && grep -q "PVC nope" "$tmp/broken.log" ||
  { echo "the validator did not name both faults:" >&2; cat "$tmp/broken.log" >&2; exit 1; }
echo "a broken render is rejected: $(wc -l <"$tmp/broken.log") error(s)"
