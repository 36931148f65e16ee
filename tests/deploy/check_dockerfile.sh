#!/usr/bin/env bash
# `make image` builds the Dockerfile for real (~20 min, an engine it installs: docs/docker.md), too long
# for every `make test`; so this checks, with the real tools and in seconds, everything the Dockerfile
# depends on that can be checked without an engine:
#  - both stages are Debian 12 (bookworm), like CI;
#  - the build stage installs with scripts/install-deps.sh, the script CI's `make test` runs;
#  - every COPY source from the build context exists and is not excluded by .dockerignore;
#  - its CMake configure line is the Makefile's (-G Ninja, CMAKE_BUILD_TYPE) and, run for real in a
#    scratch directory, defines every --target it builds, and every /build/... file it copies
#    out is an output of that configuration;
#  - the programs it installs are exactly the add_executable() programs of controller/, worker/,
#    cli/ and trainer/;
#  - the runtime stage's apt-get list holds the Debian package of every shared library that this
#    build's programs link directly (readelf NEEDED -> dpkg -S), and nothing else (ca-certificates
#    aside): no package that is merely installed on this machine;
#    libraries from the project's .venv (PyTorch's) are copied from the build stage to the same path;
#  - hadolint, when it is installed (it is not a Debian package; skipped otherwise).
# Usage: check_dockerfile.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$(cd "${1:?usage: check_dockerfile.sh SOURCE_DIR BUILD_DIR}" && pwd)
build=${2:?usage: check_dockerfile.sh SOURCE_DIR BUILD_DIR}
df=$src/Dockerfile
errors=0
fail() { echo "Dockerfile: $*" >&2; errors=$((errors + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The Dockerfile with continuation lines joined and comments dropped, one instruction per line.
sed -e '/^[[:space:]]*#/d' "$df" | sed -e ':a' -e '/\\$/N; s/\\\n//; ta' | tr -s ' ' >"$tmp/df"

# Debian 12 in every stage.
while read -r image; do
  [[ $image =~ ^debian:(bookworm|12)(-slim)?$ ]] || fail "stage image $image is not Debian 12 (bookworm)"
done < <(awk '$1 == "FROM" {print $2}' "$tmp/df")

# Installs like CI: .ci/run -> make test -> make deps -> scripts/install-deps.sh.
grep -qE '^RUN (\./)?scripts/install-deps\.sh' "$tmp/df" || fail "the build stage does not RUN scripts/install-deps.sh"
grep -q 'scripts/install-deps.sh' "$src/Makefile" || fail "the Makefile no longer installs with scripts/install-deps.sh: update the Dockerfile"

# COPY sources from the build context: exist, and .dockerignore does not exclude them.
ignored() {
  local path=$1 pat
  while read -r pat; do
    [[ -z $pat || $pat == \#* || $pat == \!* ]] && continue
    pat=${pat#/}
    # shellcheck disable=SC2053
    [[ $path == $pat || $path == $pat/* || $path == */$pat ]] && return 0
  done <"$src/.dockerignore"
  return 1
}
while read -r -a words; do
  srcs=("${words[@]:1:${#words[@]}-2}")
  for s in "${srcs[@]}"; do
    [[ $s == --* ]] && continue 2   # COPY --from=STAGE: not the build context
    [[ $s == . ]] && continue
    [[ -e $src/$s ]] || fail "COPY source $s does not exist"
    ! ignored "$s" || fail "COPY source $s is excluded by .dockerignore"
  done
done < <(grep '^COPY ' "$tmp/df")

# The CMake build: the Makefile's generator and build type, configured for real.
configure=$(grep -oE 'cmake -S \. -B /build [^&]*' "$tmp/df" | head -1 || true)
[[ -n $configure ]] || fail "no 'cmake -S . -B /build ...' configure line"
[[ $configure == *"-G Ninja"* ]] || fail "does not configure with -G Ninja as the Makefile does"
[[ $configure =~ -DCMAKE_BUILD_TYPE=Release ]] || fail "does not build Release"
# shellcheck disable=SC2016  # $(...) is Make's, matched literally
grep -qF 'cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)' "$src/Makefile" ||
  fail "the Makefile's configure line changed: update the Dockerfile's"
read -r -a flags <<<"${configure#cmake -S . -B /build }"
if ! cmake -S "$src" -B "$tmp/build" "${flags[@]}" >"$tmp/configure.log" 2>&1; then
  fail "its CMake configuration fails here:"
  tail -20 "$tmp/configure.log" >&2
else
  ninja -C "$tmp/build" -t targets all | cut -d: -f1 >"$tmp/outputs"
  read -r -a targets <<<"$(grep -oE 'cmake --build /build --target [^&]*' "$tmp/df" | sed 's/.*--target //')"
  ((${#targets[@]})) || fail "no 'cmake --build /build --target ...' line"
  for t in "${targets[@]}"; do
    grep -qxF "$t" "$tmp/outputs" || fail "builds target $t, which this CMake configuration does not define"
  done
  while read -r f; do
    grep -qxF "${f#/build/}" "$tmp/outputs" || fail "copies $f, which the configured build does not produce"
  done < <(grep '^COPY --from=build' "$tmp/df" | grep -oE '/build/[^ ]+' | sort -u)
fi

# The programs: every add_executable of the shipped components, installed into /usr/local/bin.
programs=$(cat "$src"/{controller,worker,cli,trainer}/CMakeLists.txt | sed -n 's/^add_executable(\([A-Za-z0-9_-]*\).*/\1/p' | sort -u | tr '\n' ' ')
installed=$(grep -E '^COPY --from=build .* /usr/local/bin/$' "$tmp/df" | grep -oE '/build/[^ ]+' | xargs -n1 basename | sort -u | tr '\n' ' ')
[[ $programs == "$installed" ]] ||
  fail "installs [$installed] into /usr/local/bin, but the programs are [$programs]"
grep -q '/usr/local/lib/eft/libeft_spm.so' "$tmp/df" ||
  fail "does not install libeft_spm.so where eft-train looks for it (../lib/eft/ from its directory)"

# Runtime libraries: the package of every NEEDED library of this build's programs.
runtime_pkgs=$(awk '/^FROM /{n++} n==2 && /apt-get install/' "$tmp/df" | tr ' ' '\n' | grep -E '^[a-z0-9][a-z0-9.+-]+$' | grep -vxE 'apt-get|install|rm|ca-certificates|update' | sort -u)
checked=0
needed_pkgs=()
if command -v dpkg-query >/dev/null && command -v readelf >/dev/null; then
  for p in $runtime_pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
      fail "the runtime stage installs $p, which is not an installed Debian package here (misspelt, or not from install-deps.sh)"
  done
  for bin in controller/eft-controller worker/eft-worker cli/eftctl trainer/eft-train trainer/libeft_spm.so; do
    [[ -f $build/$bin ]] || { echo "Dockerfile: $build/$bin not built: its libraries not checked"; continue; }
    checked=$((checked + 1))
    ldd "$build/$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' >"$tmp/ldd"
    for lib in $(readelf -d "$build/$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
      path=$(awk -v l="$lib" '$1 == l {print $2}' "$tmp/ldd")
      [[ -n $path ]] || { fail "$bin: cannot resolve $lib"; continue; }
      # PyTorch's libraries (and the CUDA libraries they load) come from the project's .venv, which
      # the runtime stage copies from the build stage to the same place.
      if [[ $path == "$src/.venv/"* ]]; then
        rel=${path#"$src/"}
        covered=0
        while read -r dir; do [[ /src/$rel == "$dir"/* ]] && covered=1; done < <(grep -oE '^COPY --from=build /src/\.venv[^ ]*' "$tmp/df" | awk '{print $3}')
        ((covered)) || fail "$bin needs $lib from $path, which the runtime stage does not copy from /src/.venv"
        continue
      fi
      pkg=
      for cand in "$path" "$(readlink -f "$path")" "/usr$path" "/usr$(readlink -f "$path")"; do
        pkg=$(dpkg -S "$cand" 2>/dev/null | head -1 | cut -d: -f1) && [[ -n $pkg ]] && break
      done
      [[ -n $pkg ]] || { fail "$bin: $lib ($path) belongs to no Debian package"; continue; }
      # In every Debian image already: apt itself depends on them.
      [[ $pkg =~ ^(libc6|libgcc-s1|libstdc\+\+6|zlib1g)$ ]] && continue
      grep -qxF "$pkg" <<<"$runtime_pkgs" || fail "$bin needs $lib from $pkg, which the runtime stage does not install"
      needed_pkgs+=("$pkg")
    done
  done
  # And nothing else: a package no shipped file links is dead weight (libtorch1.13 stayed in the list
  # after eft-train moved to PyTorch's wheel; a machine that still had it installed could not tell).
  if ((checked == 5)); then
    for p in $runtime_pkgs; do
      printf '%s\n' "${needed_pkgs[@]}" | grep -qxF "$p" ||
        fail "the runtime stage installs $p, which none of the shipped programs links"
    done
  fi
else
  echo "Dockerfile: no dpkg/readelf here: runtime libraries not checked"
fi

if command -v hadolint >/dev/null; then
  hadolint "$df" || fail "hadolint found problems (above)"
else
  echo "Dockerfile: hadolint is not installed: lint SKIPPED (the other checks ran)"
fi

if ((errors)); then
  echo "Dockerfile: $errors problem(s)" >&2
  exit 1
fi
echo "Dockerfile: Debian 12, CI's install script, the Makefile's CMake configuration with targets [${targets[*]}]," \
     "programs [$programs], runtime packages cover the libraries of $checked built files"
