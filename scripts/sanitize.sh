#!/usr/bin/env bash
# The test suite under the sanitizers (docs/fuzzing.md, "The suite under sanitizers"); `make sanitize`
# and `make sanitize-thread` run it.
#
# Usage: scripts/sanitize.sh address|thread [ctest arguments...]
#   address: build-asan/, the whole tree under AddressSanitizer + UndefinedBehaviorSanitizer (LeakSanitizer
#            included), then the unit and end-to-end tests (ctest -L 'unit|e2e');
#   thread:  build-tsan/, the control plane only (controller, worker, eftctl, common; the trainer needs
#            LibTorch, which is not instrumented: TSan cannot see its threads' synchronization), then
#            their unit tests.
# Both with clang-14, -fno-sanitize-recover=all: the first finding ends the process, and the test fails
# with the report in its output. Tests that cannot run under a sanitizer are listed, each with its reason,
# in tests/sanitizers/skip-<mode>.txt; the suppressions (each with its reason) are beside them.
# Extra arguments go to ctest (e.g. -R Controller, or -L unit for the unit tests alone).
# Env: JOBS (build and test jobs, nproc), SANITIZE_BUILD_DIR (build-asan or build-tsan).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODE=${1:-}
shift || true
JOBS=${JOBS:-$(nproc)}
case $MODE in
  address)
    BUILD=${SANITIZE_BUILD_DIR:-$ROOT/build-asan}
    CONFIG=(-DEFT_SANITIZE=address,undefined)
    LABELS='unit|e2e'
    ;;
  thread)
    BUILD=${SANITIZE_BUILD_DIR:-$ROOT/build-tsan}
    CONFIG=(-DEFT_SANITIZE=thread -DEFT_BUILD_TRAINER=OFF)
    LABELS='unit'
    ;;
  *)
    echo "usage: scripts/sanitize.sh address|thread [ctest arguments...]" >&2
    exit 2
    ;;
esac
SAN=$ROOT/tests/sanitizers
if ! compgen -G "/usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.asan-x86_64.a" >/dev/null; then
  echo "sanitize: clang-14's sanitizer runtimes are missing: scripts/install-deps.sh installs them (libclang-rt-14-dev)" >&2
  exit 1
fi

if [[ ! -f $BUILD/build.ninja ]]; then
  echo "sanitize: configuring $BUILD (clang-14, ${CONFIG[*]})"
  CC=clang-14 CXX=clang++-14 cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${CONFIG[@]}" \
    >"$BUILD.configure.log" 2>&1 || { cat "$BUILD.configure.log" >&2; exit 1; }
fi
echo "sanitize: building $BUILD (a first build takes about 40 minutes on 2 cores)"
cmake --build "$BUILD" -j "$JOBS"

# The skip list: one test name pattern per line, '#' starts its reason.
skip=$(sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^$/d' "$SAN/skip-$MODE.txt" | paste -sd'|')

# Every process the tests start inherits these, the trainers and daemons they spawn included.
# allocator_may_return_null: an allocation too large fails as it does without ASan (eft reports a
# failed allocation as running out of memory; OutOfMemoryMessage tests that), rather than ending.
common_opts="halt_on_error=1:print_stacktrace=1"
export UBSAN_OPTIONS="$common_opts:suppressions=$SAN/ubsan.supp"
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:detect_odr_violation=1"
export LSAN_OPTIONS="suppressions=$SAN/lsan.supp:print_suppressions=0"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$SAN/tsan.supp"

echo "sanitize: ctest -L '$LABELS' under $MODE${skip:+ (skipped: see tests/sanitizers/skip-$MODE.txt)}"
ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" -L "$LABELS" ${skip:+-E "$skip"} "$@"
