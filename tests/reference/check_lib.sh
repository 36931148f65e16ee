# Sourced by the reference test drivers (hf_interop_test.sh, real_model_test.sh): `check NAME
# COMMAND...` runs one check with its output in $work/NAME.log and prints PASS with the log's last
# line or FAIL with its tail; the caller ends with `echo "$passed passed, $failed failed"`.
passed=0 failed=0
check() {
  local name=$1; shift
  if "$@" >"$work/$name.log" 2>&1; then
    passed=$((passed + 1)); echo "PASS $name: $(tail -n 1 "$work/$name.log")"
  else
    failed=$((failed + 1)); echo "FAIL $name:"; tail -n 30 "$work/$name.log"
  fi
}
