#!/usr/bin/env bash
# Collects what the GPU machine lacks for building eft-train there (docs/gpu.md): it has PyTorch
# with CUDA and NCCL, CMake, Ninja and nvcc, but not the Debian libraries the trainer and its tests
# use, and it cannot download anything. This downloads their Debian 12 packages into .gpu-deps/debs
# (git-ignored, ~9 MB); the device call carries .gpu-deps and bench/gpu/run.sh unpacks it there.
# Usage: scripts/gpu-deps.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dest=$here/.gpu-deps/debs
PACKAGES=(
  # headers and CMake configs
  nlohmann-json3-dev libcli11-dev libyaml-cpp-dev libyaml-cpp0.7
  # the job spec schema (proto/eft/v1/spec.proto, read through spec/job_spec.h): protoc and libprotobuf
  libprotobuf-dev libprotobuf32 libprotobuf-lite32 protobuf-compiler libprotoc32
  # tokenizer: regexes, normalization, SentencePiece (the shared libraries too)
  libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libutf8proc-dev libutf8proc2
  libsentencepiece-dev libsentencepiece0
  # gloo's headers, which c10d's ProcessGroupGloo.hpp includes and PyTorch's wheels lack
  libgloo-dev
  # tests
  libgtest-dev libgmock-dev googletest
  # pkg-config, in case the machine has none
  pkgconf pkgconf-bin libpkgconf3
)
mkdir -p "$dest"
cd "$dest"
rm -f ./*.deb
apt-get download "${PACKAGES[@]}" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true
n=$(ls ./*.deb | wc -l)
[[ $n -eq ${#PACKAGES[@]} ]] || { echo "gpu-deps: got $n of ${#PACKAGES[@]} packages" >&2; exit 1; }
echo "gpu-deps: $n packages ($(du -sh . | cut -f1)) in $dest; carry .gpu-deps in the device call"
