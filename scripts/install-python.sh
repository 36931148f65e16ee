#!/usr/bin/env bash
# Makes the project's Python environment, .venv, from scripts/python-requirements.txt (every package
# pinned): PyTorch 2.x, whose LibTorch eft-train builds against (cmake/EftTorch.cmake), the CUDA
# compiler for the CUDA build, and the Hugging Face packages the tests use as references.
#
# Idempotent: a .venv made from the same requirements file is left as it is (a stamp holds the file's
# hash). About 6 GB, most of it PyTorch's CUDA libraries; ~1-2 minutes on a fast link.
#
# Then .venv/cuda: a CUDA-toolkit-shaped folder of links into the pip packages (bin/nvcc, include/,
# lib64/ with the unversioned library names FindCUDA and nvcc look for), for CMake on machines that
# have no toolkit of their own.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${EFT_VENV:-$root/.venv}
requirements=$root/scripts/python-requirements.txt
want=$(sha256sum <"$requirements" | cut -d' ' -f1)
stamp=$venv/.eft-requirements.sha256

if [[ -f $stamp && $(cat "$stamp") == "$want" && -x $venv/bin/python ]]; then
  echo "install-python: $venv is up to date ($(grep -m1 '^torch==' "$requirements"))"
else
  python=/usr/bin/python3
  [[ -x $python ]] || python=$(command -v python3)
  if [[ ! -x $venv/bin/python ]]; then
    echo "install-python: making $venv with $($python --version)"
    "$python" -m venv "$venv"
  fi
  # The venv takes ~6 GB; pip downloads each wheel under TMPDIR first (PyTorch's and its CUDA
  # libraries' are up to ~1 GB each) and deletes it once installed. Say so before pip fails half-way
  # with ENOSPC.
  check_free() {  # dir, GB needed, what for
    local free_gb
    free_gb=$(df -Pk "$1" | awk 'NR==2 {print int($4 / 1048576)}')
    if (( free_gb < $2 )); then
      echo "install-python: only ${free_gb} GB free in $1; $3 needs about $2 GB there. Free some space, or set" \
           "EFT_VENV / TMPDIR to a larger disk." >&2
      exit 1
    fi
  }
  # Only where PyTorch is not there yet: a venv that needs a package or two more is left to pip.
  if ! compgen -G "$venv/lib/python3*/site-packages/torch/__init__.py" >/dev/null; then
    check_free "$(dirname "$venv")" 7 "the Python environment (PyTorch with its CUDA libraries)"
    check_free "${TMPDIR:-/tmp}" 2 "pip's downloads"
  fi
  echo "install-python: installing $(grep -c '==' "$requirements") pinned packages into $venv (about 6 GB with" \
       "PyTorch's CUDA libraries; ~1-2 minutes on a fast link)"
  # --no-cache-dir: a copy of every wheel in ~/.cache/pip would double the disk this takes.
  "$venv/bin/pip" install --no-input --disable-pip-version-check --progress-bar off --no-cache-dir -q \
    -r "$requirements"
  echo "$want" >"$stamp"
fi

# The toolkit-shaped folder of links (remade every time: cheap, and follows a reinstall).
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cuda_pkg=$(ls -d "$site"/nvidia/cu1[0-9] 2>/dev/null | tail -n 1)
if [[ -n $cuda_pkg && -x $cuda_pkg/bin/nvcc ]]; then
  cuda=$venv/cuda
  rm -rf "$cuda"
  mkdir -p "$cuda/bin" "$cuda/lib64"
  # bin/ must be a real folder: nvcc finds its libraries at bin/../lib64.
  for f in "$cuda_pkg"/bin/*; do ln -s "$f" "$cuda/bin/"; done
  ln -s "$cuda_pkg/include" "$cuda/include"
  ln -s "$cuda_pkg/nvvm" "$cuda/nvvm"
  for f in "$cuda_pkg"/lib/*; do
    name=$(basename "$f")
    ln -sf "$f" "$cuda/lib64/$name"
    [[ $name == *.so.* ]] && ln -sf "$f" "$cuda/lib64/${name%%.so.*}.so"
  done
  echo "install-python: CUDA toolkit links in $cuda ($("$cuda/bin/nvcc" --version | tail -n 1))"
fi
