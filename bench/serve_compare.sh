#!/usr/bin/env bash
# bench/serve_compare.sh - serving throughput, kvant serve vs llama.cpp's
# llama-server, one after the other in one run on the same model file:
# C concurrent streaming clients, PROMPT-token prompts, MAXTOK output tokens
# each (ignore_eos), THREADS compute threads each.  llama-server gets C slots
# (-np C -c C*256), its best setting in the issue's measurements.
#
#   bench/serve_compare.sh [MODEL]        (default /tmp/m/s110-Q8_0.gguf, synthetic)
#   env: C=32 N=128 MAXTOK=64 PROMPT=40 THREADS=2 RUNS=1 KVANT_ARGS="" OUT=/tmp/serve_compare
#        TEMP=0 (the requests' temperature: 0 greedy; 1 is the OpenAI default,
#        sampled by each server's own chain)
#
# Prompts are PROMPT random token ids (vLLM's random dataset): the synthetic
# models' vocabulary turns ~30 words of text into ~200 tokens, so text
# prompts would not be the issue's ~40 tokens.  Prints both loadgen tables,
# then a summary with the throughput ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/serve_lib.sh
# Synthetic (random-weight) models emit byte-fallback tokens (ids 3..258) that
# leave invalid UTF-8; llama-server's output parser then aborts the stream
# ("does not match the expected Content-only format").  Its requests ban those
# ids (logit_bias): the same work per token, whole streams.
LLAMA_EXTRA=$(python3 -c 'import json; print(json.dumps({"logit_bias": {str(i): -100 for i in range(3, 259)}}))')
MODEL=${1:-/tmp/m/s110-Q8_0.gguf}
C=${C:-32} N=${N:-128} MAXTOK=${MAXTOK:-64} PROMPT=${PROMPT:-40} THREADS=${THREADS:-2} RUNS=${RUNS:-1} TEMP=${TEMP:-0}
OUT=${OUT:-/tmp/serve_compare}
mkdir -p "$OUT"
[ -f "$MODEL" ] || { echo "no model $MODEL (build/kvant synth --shape stories110M --type Q8_0 -o $MODEL)"; exit 2; }
LG=(--prompt-tokens "$PROMPT" --vocab 32000 --max-tokens "$MAXTOK" -c "$C" -n "$N" --temperature "$TEMP" --timeout 900)

run_one() { # NAME PORT RUN [loadgen args]
  local name=$1 port=$2 run=$3; shift 3
  "$KVANT" loadgen --url "http://127.0.0.1:$port" -c 4 -n 4 --prompt-tokens "$PROMPT" --max-tokens 8 "$@" --json >/dev/null 2>&1 || true # warm-up
  "$KVANT" loadgen --url "http://127.0.0.1:$port" "${LG[@]}" "$@" --json-out "$OUT/$name-$run.json" | tee "$OUT/$name-$run.txt" || true
}

for r in $(seq "$RUNS"); do
  port=$(free_port)
  echo "== kvant serve (run $r): $MODEL, -t $THREADS ${KVANT_ARGS:-}"
  start_kvant "$port" "$OUT/kvant.log" -m "$MODEL" -t "$THREADS" ${KVANT_ARGS:-}
  run_one kvant "$port" "$r"
  stop_server
  port=$(free_port)
  echo "== llama-server (run $r): -np $C -c $((C * 256)) -t $THREADS"
  start_llama "$port" "$OUT/llama.log" -m "$MODEL" -np "$C" -c $((C * 256)) -t "$THREADS"
  run_one llama "$port" "$r" --extra-body "$LLAMA_EXTRA"
  stop_server
done

python3 - "$OUT" "$RUNS" <<'PY'
import json, sys
out, runs = sys.argv[1], int(sys.argv[2])
rows = {}
for name in ("kvant", "llama"):
    rows[name] = [json.load(open(f"{out}/{name}-{r}.json")) for r in range(1, runs + 1)]
def avg(name, f): return sum(f(j) for j in rows[name]) / len(rows[name])
print("\nserver        out tok/s  req/s  TTFT p50  TTFT p99  TPOT p50  ITL p99  E2E p99  errors   (ms; mean of %d runs)" % runs)
for name, label in (("kvant", "kvant serve"), ("llama", "llama-server")):
    print("%-12s %10.1f %6.2f %9.1f %9.1f %9.1f %8.1f %8.1f %7d" % (label,
        avg(name, lambda j: j["output_throughput"]), avg(name, lambda j: j["request_throughput"]),
        avg(name, lambda j: j["ttft_ms"]["p50"]), avg(name, lambda j: j["ttft_ms"]["p99"]),
        avg(name, lambda j: j["tpot_ms"]["p50"]), avg(name, lambda j: j["itl_ms"]["p99"]),
        avg(name, lambda j: j["e2e_ms"]["p99"]), sum(j["errors"] for j in rows[name])))
k, l = avg("kvant", lambda j: j["output_throughput"]), avg("llama", lambda j: j["output_throughput"])
print("throughput ratio kvant / llama.cpp: %.2fx   (target >= 2.5x and >= 1360 tok/s)" % (k / l if l else 0))
pairs = [a["output_throughput"] / b["output_throughput"] for a, b in zip(rows["kvant"], rows["llama"]) if b["output_throughput"]]
print("per-run ratios (each run's kvant over the llama-server run right after it): " + ", ".join("%.2f" % x for x in pairs))
print("TTFT p99 kvant / llama.cpp: %.2f   (target <= 1)" % (avg("kvant", lambda j: j["ttft_ms"]["p99"]) / max(1e-9, avg("llama", lambda j: j["ttft_ms"]["p99"]))))
PY
