#!/usr/bin/env bash
# The REST API against its contract, docs/openapi.yaml, checked by a real client: Schemathesis (a
# property-based tester, pinned in scripts/python-requirements.txt) generates requests from the
# document, valid and invalid, in all four phases (the document's examples, coverage of every
# constraint's edges, random fuzzing, and stateful sequences that follow the document's links:
# submit -> get -> logs -> cancel, list nodes -> drain -> undrain), and checks every response against
# it (`--checks all`: no 5xx, only documented status codes, content types and headers, bodies that
# match their schema, valid requests accepted and invalid ones refused, ...).
#
# Usage: openapi_contract_test.sh BUILD_DIR PYTHON WORK_DIR MODE [MAX_EXAMPLES]
#   MODE open: a controller without authentication;
#        auth: with --auth-tokens, run once as a submitter and once as an admin (a call the role may
#              not make must be 403, never 2xx or 5xx: the document says so and the checks hold it)
#
# The controller has one real worker (node1, 2 slots), so nodes can be drained and undrained and jobs
# placed; tests/api/st_hooks.py gives every generated job the command /bin/true, so no generated
# program ever runs and placed jobs finish at once. The controller must be alive at the end, and its
# log free of unexpected exceptions. Exit 77 (skipped) where PYTHON has no Schemathesis (a GPU
# machine's own Python).
set -uo pipefail
build=$1 py=$2 work=$3 mode=$4 max_examples=${5:-50}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
py=$(cd "$(dirname "$py")" && pwd)/$(basename "$py") st=$(cd "$(dirname "$py")" && pwd)/st
[[ -x $st ]] || { echo "openapi_contract_test: no Schemathesis beside $py (scripts/install-python.sh installs it): skipped"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; }
trap cleanup EXIT
free_port() { "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
fail() { echo "openapi_contract_test: $*" >&2; exit 1; }

grpc=127.0.0.1:$(free_port) http=127.0.0.1:$(free_port)
auth_args=() submitter="" admin=""
if [[ $mode == auth ]]; then
  submitter=submitter-token-$RANDOM$RANDOM$RANDOM$RANDOM admin=admin-token-$RANDOM$RANDOM$RANDOM$RANDOM
  join=join-token-$RANDOM$RANDOM$RANDOM$RANDOM
  cat >"$work/tokens.yaml" <<YAML
- {user: alice, role: submitter, token: $submitter}
- {user: root, role: admin, token: $admin}
YAML
  echo "$join" >"$work/join-token"
  chmod 600 "$work/tokens.yaml" "$work/join-token"
  auth_args=(--auth-tokens "$work/tokens.yaml" --join-token-file "$work/join-token")
fi
"$build/controller/eft-controller" --listen "$grpc" --http "$http" --db "$work/controller.db" \
  "${auth_args[@]}" >"$work/controller.log" 2>&1 &
pids+=($!) controller=$!
worker_args=()
[[ $mode == auth ]] && worker_args=(--join-token-file "$work/join-token")
"$build/worker/eft-worker" --controller "$grpc" --name node1 --slots 2 --work-dir "$work/worker" \
  --snapshot-dir "$work/worker/shm" "${worker_args[@]}" >"$work/worker.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  curl -fsS "http://$http/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "http://$http/readyz" >/dev/null || fail "the controller did not get ready: $(tail -5 "$work/controller.log")"

run_st() {  # role [extra st flags...]
  local name=$1; shift
  echo "== schemathesis ($name)"
  (cd "$work" && EFT_CONTRACT_ROLE=$name SCHEMATHESIS_HOOKS=st_hooks PYTHONPATH="$here" "$st" --config-file "$here/schemathesis.toml" run "$root/docs/openapi.yaml" \
     --url "http://$http" --checks all --phases examples,coverage,fuzzing,stateful \
     --max-examples "$max_examples" --seed 1 --workers 1 --request-timeout 10 \
     --report junit --report-dir "$work/report-${name:-open}" "$@")
}
status=0
if [[ $mode == auth ]]; then
  run_st submitter -H "Authorization: Bearer $submitter" || status=1
  run_st admin -H "Authorization: Bearer $admin" || status=1
else
  run_st "" || status=1
fi
kill -0 "$controller" 2>/dev/null || fail "the controller died: $(tail -20 "$work/controller.log")"
curl -fsS "http://$http/healthz" >/dev/null || fail "the controller stopped answering /healthz"
if grep -n "unexpected exception" "$work/controller.log"; then fail "the controller logged unexpected exceptions"; fi
((status == 0)) || fail "Schemathesis found failures (above; logs in $work)"
echo "openapi_contract_test: $mode: no failures, the controller alive"
