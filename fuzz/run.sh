#!/usr/bin/env bash
# fuzz/run.sh - runs every libFuzzer harness for a bounded time and prints a
# table (harness, executions, edges, corpus, result).  Fails on any crash,
# leak, timeout (an input taking > 1 s) or out-of-memory (> 2 GiB).
#   fuzz/run.sh [BUILD_DIR] [HARNESS...]
#   FUZZ_TIME  seconds per harness (default 60)
#   FUZZ_SEED  libFuzzer's -seed (default 1: the same run every time)
# BUILD_DIR (default build-fuzz) is configured and built here with clang and
# -DKVANT_FUZZ=ON when it has no fuzz/ binaries yet.  The committed corpus
# fuzz/corpus/NAME is copied to a scratch directory first, so a run never
# changes the tree; inputs that crash are kept in BUILD_DIR/fuzz/artifacts/NAME
# (add each one to fuzz/corpus/NAME with a unit test, fuzz/README.md).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-fuzz}
shift || true
time_s=${FUZZ_TIME:-60}
seed=${FUZZ_SEED:-1}

if ! ls "$build"/fuzz/fuzz_* >/dev/null 2>&1; then
  CC=clang cmake -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVANT_FUZZ=ON -DKVANT_TESTS=OFF >/dev/null || exit 1
fi
cmake --build "$build" -j"$(nproc 2>/dev/null || echo 2)" >/dev/null || { cmake --build "$build" 2>&1 | tail -30; exit 1; }

names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for b in "$build"/fuzz/fuzz_*; do names+=("$(basename "$b" | sed 's/^fuzz_//')"); done
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fail=0
printf '%-18s %12s %8s %10s %8s  %s\n' harness executions edges features corpus result
for n in "${names[@]}"; do
  bin="$build/fuzz/fuzz_$n"
  [ -x "$bin" ] || { echo "fuzz/run.sh: no harness $bin" >&2; fail=1; continue; }
  work="$scratch/$n"
  art="$build/fuzz/artifacts/$n"
  mkdir -p "$work" "$art"
  [ -d "fuzz/corpus/$n" ] && cp -r "fuzz/corpus/$n/." "$work/"
  extra=()
  [ -f "fuzz/$n.dict" ] && extra+=("-dict=fuzz/$n.dict")
  [ -f "fuzz/$n.flags" ] && read -r -a more < "fuzz/$n.flags" && extra+=("${more[@]}")
  log="$build/fuzz/$n.log"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$bin" "$work" -max_total_time="$time_s" -seed="$seed" -timeout=1 -rss_limit_mb=2048 \
      -malloc_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$art/" "${extra[@]}" > "$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 | awk '{print $2}')
  ft=$(grep -Eo 'ft: [0-9]+' "$log" | tail -1 | awk '{print $2}')
  corp=$(find "$work" -type f | wc -l) # the seeds and what this run added
  if [ $rc -eq 0 ]; then res=ok; else
    res="FAILED (exit $rc): $(grep -a -Eo 'ERROR: [A-Za-z]+: [^ ]+( [^ ]+)?|ALARM: working on the last Unit for [0-9]+ seconds|out-of-memory \(malloc\([0-9]+\)\)|out-of-memory \(used: [0-9]+Mb' "$log" | head -1 | tr -d '\n\r')"
    fail=1
  fi
  printf '%-18s %12s %8s %10s %8s  %s\n' "$n" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$corp" "$res"
  if [ $rc -ne 0 ]; then
    echo "---- $log (last 40 lines); the input is in $art/" >&2
    tail -40 "$log" >&2
  fi
done
exit $fail
