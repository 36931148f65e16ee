#!/usr/bin/env bash
# Installs exactly the Debian 12 packages that eft's build and tests need.
# Idempotent: when every package is already installed it does nothing (and needs no root).
# Then the Python packages from PyPI (PyTorch, the CUDA compiler, the Hugging Face references):
# scripts/install-python.sh.
set -euo pipefail

PACKAGES=(
  # toolchain
  g++ cmake ninja-build pkg-config ccache
  # clang: the thread_safety.* tests check the lock annotations with -Wthread-safety
  clang
  # fuzzing (docs/fuzzing.md, `make fuzz`): clang-14's sanitizer runtimes and libFuzzer
  libclang-rt-14-dev libfuzzer-14-dev
  # control plane: gRPC/Protobuf, SQLite, Boost.Asio/Beast, config and CLI parsing
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libsqlite3-dev libboost-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev
  # trainer: LibTorch itself is PyTorch's, from PyPI (below); c10d's Gloo header needs gloo's headers,
  # which the wheel lacks: Debian's (tests/unit/trainer/parallel proves they fit); a fast BLAS for the
  # Python references
  libgloo-dev libopenblas0-pthread
  # the project's Python environment (.venv)
  python3-venv
  # tests: GoogleTest; sqlite3 and ps for checks from outside (the references run in .venv's PyTorch)
  libgtest-dev libgmock-dev sqlite3 procps python3-numpy
  # tests: promtool checks our /metrics exposition; the prometheus server scrapes it in e2e tests
  prometheus
  # SFT data pipeline: tokenizer.json pre-tokenizer regexes, SentencePiece models; chat templates
  # are checked against Python's jinja2
  libpcre2-dev libsentencepiece-dev libutf8proc-dev python3-jinja2
  # auth tests make self-signed certificates
  openssl
  # deployment tests: a one-node Slurm (slurmctld + slurmd + munge) runs eft-cluster.sbatch for real
  slurm-wlm munge
  # k8s/ renders are converted to JSON for schema validation
  python3-yaml
  # deploy/systemd units are checked with systemd-analyze verify
  systemd
)
# Tokenizer tests compare with Hugging Face's own tokenizers through Node (npm packages fetched at
# test time); Debian's Node.js unless the machine already has one.
command -v npm >/dev/null || PACKAGES+=(nodejs npm)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PACKAGES[@]} Debian packages present"
else
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    SUDO="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

"$(dirname "$0")/install-python.sh"
