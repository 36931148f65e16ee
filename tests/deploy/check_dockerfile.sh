#!/usr/bin/env bash
# The Dockerfile cannot be built here (no Docker engine on CI machines), so check what it depends
# on with the real build: every COPY source exists, it installs with scripts/install-deps.sh and
# builds with `make build` like CI, and every file it copies out of the build is a file this
# build actually produces (so a renamed binary or module breaks this test, not the image build).
# Usage: check_dockerfile.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
df=$src/Dockerfile
fail() { echo "Dockerfile: $*" >&2; exit 1; }
grep -q '^RUN scripts/install-deps.sh' "$df" || fail "does not install with scripts/install-deps.sh"
grep -q 'make build' "$df" || fail "does not build with make build"
grep -q '^FROM debian:12' "$df" || fail "is not based on Debian 12"
# COPY sources from the build context.
while read -r from; do
  [[ -e $src/$from ]] || fail "COPY source $from does not exist"
done < <(grep -E '^COPY [^-]' "$df" | awk '{print $2}' | grep -v '^\.$')
# Files copied out of /build must exist in this build under the same relative paths.
n=0
for f in $(grep -oE '/build/[A-Za-z0-9_./-]+' "$df" | sort -u); do
  [[ -f $build/${f#/build/} ]] || fail "copies $f, which this build does not produce ($build/${f#/build/})"
  n=$((n + 1))
done
((n >= 5)) || fail "copies only $n build outputs"
# And the programs eft-train needs next to it: its SentencePiece module is looked up in
# ../lib/eft/ relative to the binary (/usr/local/bin -> /usr/local/lib/eft).
grep -q '/usr/local/lib/eft/' "$df" || fail "does not install libeft_spm.so where eft-train looks for it"
echo "Dockerfile: $n build outputs exist, COPY sources exist, CI's install and build steps"
