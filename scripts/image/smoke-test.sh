#!/usr/bin/env bash
# Starts the built image's programs the way docs/docker.md starts them and checks that they work
# (docs/docker.md, "What was checked"). Usage: scripts/image/smoke-test.sh [IMAGE] (default eft:dev).
#  - each program answers --help; every shared library of the programs and of libeft_spm.so resolves
#    inside the image (ldd), LibTorch's and the CUDA libraries from /src/.venv;
#  - the container runs as uid/gid 10001 in /var/lib/eft, which it can write;
#  - `eft-train tokenize` on a SentencePiece tokenizer.model (trained here, when g++ and
#    libsentencepiece-dev are installed) loads /usr/local/lib/eft/libeft_spm.so next to LibTorch and
#    gives the ids this checkout's build/trainer/eft-train gives (when built);
#  - `eft-train version`; a random tiny llama made with `eft-train init-model` trains 3 steps on 2 ranks
#    (gloo) on the CPU and writes its model;
#  - a controller container with a volume, the tokens files mounted read-only and docs/docker.md's flags
#    answers /healthz, /readyz and (with a token) /metrics on its REST port from the host, and the
#    image's eftctl on gRPC; a worker container (docs/docker.md's flags, on a Docker network instead of
#    the host's, no GPU) joins it and answers its own /healthz; `docker stop` stops the controller with
#    exit status 0 and a controller started again on the same volume has the same database.
# Everything started (containers, network, volume, files) is removed at the end, also on failure.
# shellcheck disable=SC2015  # `check && ok ... || bad ...`: ok only echoes, so bad runs only when the check fails
set -euo pipefail
image=${1:-eft:dev}
root=$(cd "$(dirname "$0")/../.." && pwd)
p=eft-smoke-$$
tmp=$(mktemp -d "${TMPDIR:-/tmp}/$p.XXXXXX")
failures=0
ok() { echo "smoke: ok: $*"; }
bad() { echo "smoke: FAILED: $*" >&2; failures=$((failures + 1)); }
cleanup() {
  docker rm -f "$p-controller" "$p-controller2" "$p-worker" >/dev/null 2>&1 || true
  docker network rm "$p-net" >/dev/null 2>&1 || true
  docker volume rm "$p-state" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
run() { docker run --rm "$image" "$@"; }
docker image inspect "$image" >/dev/null || { echo "smoke: no image $image (make image)" >&2; exit 1; }

for prog in eft-controller eft-worker eftctl eft-train; do
  if out=$(run "$prog" --help 2>&1); then ok "$prog --help: $(head -1 <<<"$out")"; else bad "$prog --help: $out"; fi
done
missing=$(run sh -c 'for f in /usr/local/bin/eft-* /usr/local/bin/eftctl /usr/local/lib/eft/libeft_spm.so; do
  ldd "$f" | sed -n "s|^|$f: |; /not found/p"; done' 2>&1) || true
[[ -z $missing ]] && ok "every library of the 4 programs and libeft_spm.so resolves" || bad "unresolved libraries: $missing"
torch=$(run sh -c 'ldd /usr/local/bin/eft-train | grep -E "libtorch_cuda|libcudart|libnccl|libc10\.so"' 2>&1 || true)
grep -q '/src/.venv/' <<<"$torch" && ok "eft-train's LibTorch: $(tr -s ' \t\n' ' ' <<<"$torch" | cut -c1-300)" ||
  bad "LibTorch not from /src/.venv: $torch"
who=$(run sh -c 'echo "$(id -u):$(id -g) $(pwd) HOME=$HOME"; touch /var/lib/eft/w && test -w /var/lib/eft-worker && echo writable')
[[ $who == "10001:10001 /var/lib/eft HOME=/var/lib/eft"*writable ]] && ok "user: $(tr '\n' ' ' <<<"$who")" || bad "user: $who"

# SentencePiece through libeft_spm.so, LibTorch loaded (spm_shim.h).
if command -v g++ >/dev/null && pkg-config --exists sentencepiece 2>/dev/null; then
  mkdir -p "$tmp/spm/tok"
  cat >"$tmp/spm/train.cc" <<'CC'
#include <sentencepiece_trainer.h>
#include <fstream>
int main() {
  const char* lines[] = {"The quick brown fox jumps over the lazy dog.", "Fine-tuning language models is fun.",
                         "Привет, как дела?", "数据并行训练", "tokens, tokens and more tokens 12345"};
  std::ofstream f("train.txt");
  for (int i = 0; i < 400; ++i) f << lines[i % 5] << " " << i << "\n";
  f.close();
  return sentencepiece::SentencePieceTrainer::Train("--input=train.txt --model_prefix=tok/tokenizer --vocab_size=400 "
      "--model_type=bpe --byte_fallback=true --character_coverage=1.0 --minloglevel=2").ok() ? 0 : 1;
}
CC
  # shellcheck disable=SC2046  # pkg-config's flags are words
  (cd "$tmp/spm" && g++ -O1 train.cc -o train $(pkg-config --cflags --libs sentencepiece) -lsentencepiece_train &&
     ./train >/dev/null 2>&1)
  printf 'The lazy fox</s>\nПривет 12345\n' >"$tmp/spm/tok/in.txt"
  chmod -R a+rX "$tmp"
  if ids=$(docker run --rm -v "$tmp/spm/tok:/tok:ro" "$image" eft-train tokenize --tokenizer /tok --file /tok/in.txt 2>"$tmp/spm.err"); then
    if [[ -x $root/build/trainer/eft-train ]]; then
      want=$("$root/build/trainer/eft-train" tokenize --tokenizer "$tmp/spm/tok" --file "$tmp/spm/tok/in.txt" 2>/dev/null)
      [[ $ids == "$want" ]] && ok "eft-train tokenize (tokenizer.model via libeft_spm.so): $(tr '\n' '|' <<<"$ids"), as build/'s eft-train" ||
        bad "eft-train tokenize gives [$ids], build/'s eft-train [$want]"
    else
      [[ $ids =~ ^[0-9] ]] && ok "eft-train tokenize (tokenizer.model via libeft_spm.so): $(tr '\n' '|' <<<"$ids")" || bad "tokenize: $ids"
    fi
  else
    bad "eft-train tokenize: $(cat "$tmp/spm.err")"
  fi
else
  echo "smoke: SKIPPED the SentencePiece check (needs g++ and libsentencepiece-dev here to train a model)"
fi

# LibTorch computing in the image: a random tiny llama, 3 optimizer steps on 2 ranks (gloo) on the CPU.
if out=$(run eft-train version 2>&1); then ok "$out"; else bad "eft-train version: $out"; fi
mkdir -p "$tmp/train"
awk 'BEGIN { srand(3); for (i = 0; i < 32; i++) { n = 6 + int(rand() * 15); ids = ""; labels = "";
  for (t = 0; t < n; t++) { id = 1 + int(rand() * 127); ids = ids (t ? "," : "") id; labels = labels (t ? "," : "") (t < 3 ? -100 : id) }
  printf "{\"input_ids\":[%s],\"labels\":[%s]}\n", ids, labels } }' >"$tmp/train/data.jsonl"
cat >"$tmp/train/job.yaml" <<'YAML'
name: tiny
model: /m/model
data: {train: /m/data.jsonl, max_seq_len: 64, packing: false}
training: {global_batch_size: 8, micro_batch_size: 2, lr: 0.001, precision: fp32, max_grad_norm: 1.0, schedule: {type: cosine, warmup_ratio: 0.1}, epochs: 1}
YAML
chmod -R a+rwX "$tmp/train"
if out=$(docker run --rm -v "$tmp/train:/m" "$image" sh -c 'eft-train init-model --arch llama --hidden 64 --layers 2 \
      --heads 4 --kv-heads 2 --intermediate 96 --vocab-size 128 --dtype float32 --seed 1 --out /m/model &&
    eft-train train --config /m/job.yaml --nproc 2 --max-steps 3 --threads 1 --output-dir /m/out' 2>&1) &&
   [[ -s $tmp/train/out/model.safetensors ]]; then
  ok "eft-train trains on the CPU in the image (2 ranks): $(grep '^step 3/3' <<<"$out" | cut -d'|' -f1-2)"
else bad "eft-train train in the image: $(tail -5 <<<"$out")"; fi

# A controller as docs/docker.md starts it (on a Docker network rather than published ports).
token=$(openssl rand -hex 32)
openssl rand -hex 32 >"$tmp/join-token"
printf -- '- {user: root, role: admin, token_sha256: %s}\n' "$(printf %s "$token" | sha256sum | cut -d' ' -f1)" >"$tmp/tokens.yaml"
chmod 644 "$tmp/join-token" "$tmp/tokens.yaml"   # readable by uid 10001 (docs/docker.md)
chmod 755 "$tmp"
docker network create "$p-net" >/dev/null
docker volume create "$p-state" >/dev/null
start_controller() {   # NAME
  docker run -d --name "$1" --network "$p-net" --network-alias controller \
    -v "$p-state:/var/lib/eft" \
    -v "$tmp/tokens.yaml:/etc/eft/tokens.yaml:ro" -v "$tmp/join-token:/etc/eft/join-token:ro" \
    "$image" \
    eft-controller --db /var/lib/eft/eft.db --listen 0.0.0.0:7070 --http 0.0.0.0:8080 \
      --auth-tokens /etc/eft/tokens.yaml --join-token-file /etc/eft/join-token >/dev/null
}
wait_http() {   # URL [CURL ARGS]: 30 s for a 200
  local url=$1; shift
  for _ in $(seq 60); do curl -fsS -m 2 "$@" "$url" >"$tmp/body" 2>/dev/null && return 0; sleep 0.5; done
  return 1
}
start_controller "$p-controller"
ip=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$p-controller")
if wait_http "http://$ip:8080/healthz"; then ok "controller /healthz from the host at $ip:8080: $(head -c 100 "$tmp/body")"
else bad "controller /healthz at $ip:8080 does not answer; its log: $(docker logs "$p-controller" 2>&1 | tail -5)"; fi
wait_http "http://$ip:8080/readyz" && ok "controller /readyz: $(head -c 100 "$tmp/body")" || bad "controller /readyz"
if wait_http "http://$ip:8080/metrics" -H "Authorization: Bearer $token"; then
  ok "controller /metrics with the admin token: $(grep -c '^eft_' "$tmp/body") eft_ samples"
else bad "controller /metrics"; fi
code=$(curl -s -o /dev/null -w '%{http_code}' -m 2 "http://$ip:8080/metrics" || true)
[[ $code == 401 ]] && ok "/metrics without a token: 401" || bad "/metrics without a token: $code"
if out=$(docker run --rm --network "$p-net" "$image" eftctl --controller controller:7070 --token "$token" node list 2>&1); then
  ok "the image's eftctl over gRPC: node list: $(tr -s ' \n' ' ' <<<"$out" | cut -c1-120)"
else bad "eftctl node list: $out"; fi

# A worker as docs/docker.md starts it, without --gpus/--network host (no GPU, the smoke network).
docker run -d --name "$p-worker" --init --network "$p-net" --ipc host --stop-timeout 300 \
  -v "$tmp/join-token:/etc/eft/join-token:ro" "$image" \
  sh -c 'exec eft-worker --controller controller:7070 --join-token-file /etc/eft/join-token --name "$(hostname)" \
    --address "$(hostname -i | cut -d" " -f1)" --metrics 0.0.0.0:9101 --work-dir /var/lib/eft-worker' >/dev/null
wip=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$p-worker")
wait_http "http://$wip:9101/healthz" && ok "worker /healthz at $wip:9101: $(head -c 100 "$tmp/body")" ||
  bad "worker /healthz; its log: $(docker logs "$p-worker" 2>&1 | tail -5)"
joined=
for _ in $(seq 30); do
  out=$(docker run --rm --network "$p-net" "$image" eftctl --controller controller:7070 --token "$token" -o json node list 2>&1 || true)
  grep -q "$(docker inspect -f '{{.Config.Hostname}}' "$p-worker")" <<<"$out" && { joined=1; break; }
  sleep 1
done
[[ -n $joined ]] && ok "the worker joined: eftctl node list shows it" || bad "the worker did not join: $out; its log: $(docker logs "$p-worker" 2>&1 | tail -5)"
docker stop -t 30 "$p-worker" >/dev/null
[[ $(docker inspect -f '{{.State.ExitCode}}' "$p-worker") == 0 ]] && ok "worker: docker stop -> exit 0" ||
  bad "worker exit status $(docker inspect -f '{{.State.ExitCode}}' "$p-worker") on docker stop: $(docker logs "$p-worker" 2>&1 | tail -3)"

# docker stop: SIGTERM, the database closed; the same volume again.
docker stop -t 30 "$p-controller" >/dev/null
status=$(docker inspect -f '{{.State.ExitCode}}' "$p-controller")
[[ $status == 0 ]] && ok "controller: docker stop -> exit 0" || bad "controller exit status $status on docker stop: $(docker logs "$p-controller" 2>&1 | tail -3)"
files=$(docker run --rm -v "$p-state:/var/lib/eft" "$image" sh -c 'ls -ln /var/lib/eft | tail -n +2' | awk '{print $3":"$4, $NF}' | tr '\n' ' ')
[[ $files == *"10001:10001 eft.db"* ]] && ok "the volume holds the database, owned by 10001: $files" || bad "volume: $files"
start_controller "$p-controller2"
ip=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$p-controller2")
if wait_http "http://$ip:8080/readyz" && out=$(docker run --rm --network "$p-net" "$image" eftctl --controller controller:7070 --token "$token" -o json node list 2>&1) &&
   grep -q "$(docker inspect -f '{{.Config.Hostname}}' "$p-worker")" <<<"$out"; then
  ok "a controller started again on the volume knows the worker from its database"
else bad "restart on the volume: $out $(docker logs "$p-controller2" 2>&1 | tail -5)"; fi

if ((failures)); then echo "smoke: $failures check(s) FAILED" >&2; exit 1; fi
echo "smoke: all checks passed ($image)"
