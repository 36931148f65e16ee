#!/usr/bin/env bash
# `make image`: builds the container image from the repository's Dockerfile (docs/docker.md).
#  1. scripts/image/install-engine.sh: Debian's docker.io and debootstrap when missing, dockerd started
#     when no engine answers;
#  2. scripts/image/make-base.sh: debian:bookworm and debian:bookworm-slim, pulled where a registry
#     answers, else made here with debootstrap from apt's mirror and `docker import`ed under those names;
#  3. the classic builder (DOCKER_BUILDKIT=0: BuildKit is not part of Debian's docker.io 20.10), tagged
#     $EFT_IMAGE (eft:dev) and $EFT_IMAGE_TAGS (ghcr.io/elastic-ft/eft:0.1.0, the name k8s/ and
#     docs/docker.md use). The bundle of CA certificates the host's pip trusts (EFT_BUILD_CA_BUNDLE, else
#     PIP_CERT, else SSL_CERT_FILE) goes to the build stage only (scripts/image/extra-ca/README).
# The build stage is tagged too, $EFT_BUILD_STAGE_IMAGE (eft:build, ~7.7 GB): the classic builder's
# cache, so that a rebuild after a source change only recompiles, rather than leaving it as an unnamed
# (dangling) image; `docker image rm eft:build` frees the space (the next build then starts over).
# What the tags pointed at before, when a rebuild leaves it untagged and unused, is deleted (a few GB
# each). Extra arguments go to `docker build` (e.g. --no-cache).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
image=${EFT_IMAGE:-eft:dev}
stage_image=${EFT_BUILD_STAGE_IMAGE:-eft:build}
read -r -a tags <<<"${EFT_IMAGE_TAGS-ghcr.io/elastic-ft/eft:0.1.0}"
here=$root/scripts/image

"$here/install-engine.sh"
"$here/make-base.sh"

ca_dir=$here/extra-ca
bundle=${EFT_BUILD_CA_BUNDLE-${PIP_CERT:-${SSL_CERT_FILE:-}}}
build_args=()
rm -f "$ca_dir/ca-certificates.crt"
trap 'rm -f "$ca_dir/ca-certificates.crt"' EXIT
if [[ -n $bundle ]]; then
  [[ -s $bundle ]] || { echo "image: CA bundle $bundle is missing or empty (EFT_BUILD_CA_BUNDLE= for none)" >&2; exit 1; }
  cp "$bundle" "$ca_dir/ca-certificates.crt"
  build_args+=(--build-arg PIP_CERT=/etc/eft-build-ca/ca-certificates.crt
               --build-arg SSL_CERT_FILE=/etc/eft-build-ca/ca-certificates.crt)
  echo "image: the build stage's pip trusts $bundle (build stage only)"
fi

id_of() { docker image inspect -f '{{.Id}}' "$1" 2>/dev/null || true; }
old=$(id_of "$image")
old_stage=$(id_of "$stage_image")
tag_args=(-t "$image")
for t in "${tags[@]}"; do tag_args+=(-t "$t"); done
echo "image: DOCKER_BUILDKIT=0 docker build ${tag_args[*]} $root (on 2 cores ~20 min the first time:" \
     "Debian packages, PyTorch with its CUDA libraries from PyPI (~3 GB download), eft in Release)"
start=$SECONDS
out=$(mktemp)
trap 'rm -f "$ca_dir/ca-certificates.crt" "$out"' EXIT
DOCKER_BUILDKIT=0 docker build "${build_args[@]}" "${tag_args[@]}" "$@" "$root" | tee "$out"
new=$(id_of "$image")
echo "image: built $image ($new) in $(((SECONDS - start) / 60)) min $(((SECONDS - start) % 60)) s," \
     "$(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.2f GB", $1 / 1e9}')"
# The build stage under a name: the image of its last step, the last ` ---> ID` before the second
# FROM in the builder's output. Not a second `docker build --target build`: when a file of the tree
# changed during the build (an editor's save), that one misses the cache at `COPY . .`, compiles
# everything again (12 min on 2 cores; seen on 2026-11-29) and tags a build of another tree than the
# image's. The second build is only the fallback when the output has no such line (-q).
stage_id=$(awk '/^Step [0-9]+\/[0-9]+ : FROM / && ++from == 2 { print id; exit } /^ ---> [0-9a-f]+$/ { id = $2 }' "$out")
if [[ -n $stage_id ]]; then
  docker tag "$stage_id" "$stage_image"
else
  DOCKER_BUILDKIT=0 docker build -q --target build "${build_args[@]}" -t "$stage_image" "$root" >/dev/null
fi
for prev in "$old" "$old_stage"; do
  [[ -n $prev && $prev != "$(id_of "$image")" && $prev != "$(id_of "$stage_image")" ]] || continue
  [[ -z $(docker image inspect -f '{{join .RepoTags " "}}' "$prev" 2>/dev/null) ]] || continue
  [[ -z $(docker ps -aq --filter "ancestor=$prev") ]] || continue
  docker image rm "$prev" >/dev/null 2>&1 && echo "image: deleted the previous build's $prev"
done
