#!/usr/bin/env bash
# bench/serve_chunked_prefill.sh - does a long prompt stall the decoders?
# 8 streams decode 256 tokens each (40-token prompts); 1 s in, one
# 2000-token prompt arrives (16 output tokens).  Reports the decoders'
# inter-token gaps (median, p99, max) and the long prompt's TTFT, with and
# without the injected prompt, and the floor under that TTFT here (kvant
# prefilling the 2000 tokens alone), for kvant serve and llama.cpp's llama-server
# (default batch, and -b 64 -ub 64, the issue's two settings).
#
#   bench/serve_chunked_prefill.sh [MODEL]   (default /tmp/m/s110-Q8_0-4k.gguf, synthetic,
#                                            made with kvant synth if missing)
#   env: THREADS=2 KVANT_ARGS="--target-step-ms 150" SKIP_LLAMA=0 OUT=/tmp/serve_chunked
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/serve_lib.sh
# Synthetic (random-weight) models emit byte-fallback tokens (ids 3..258) that
# leave invalid UTF-8; llama-server's output parser then aborts the stream
# ("does not match the expected Content-only format").  Its requests ban those
# ids (logit_bias): the same work per token, whole streams.
LLAMA_EXTRA=$(python3 -c 'import json; print(json.dumps({"logit_bias": {str(i): -100 for i in range(3, 259)}}))')
MODEL=${1:-/tmp/m/s110-Q8_0-4k.gguf}
THREADS=${THREADS:-2} OUT=${OUT:-/tmp/serve_chunked}
KVANT_ARGS=${KVANT_ARGS:---target-step-ms 150}
mkdir -p "$OUT"
if [ ! -f "$MODEL" ]; then
  echo "== making $MODEL (synthetic stories110M shape, Q8_0, ctx 4096)"
  "$KVANT" synth --shape stories110M --type Q8_0 --ctx 4096 -o "$MODEL.tmp.$$"
  mv -n "$MODEL.tmp.$$" "$MODEL"; rm -f "$MODEL.tmp.$$"  # another run may have made it meanwhile
fi
LG=(-c 8 -n 8 --prompt-tokens 40 --vocab 32000 --max-tokens 256 --timeout 900)
INJ=(--inject-at 1 --inject-tokens 2000 --inject-max-tokens 16)

measure() { # NAME PORT [loadgen args]
  local name=$1 port=$2; shift 2
  "$KVANT" loadgen --url "http://127.0.0.1:$port" -c 2 -n 2 --prompt-tokens 40 --max-tokens 4 "$@" --json >/dev/null 2>&1 || true
  "$KVANT" loadgen --url "http://127.0.0.1:$port" "${LG[@]}" "$@" --json-out "$OUT/$name-base.json" >/dev/null || true
  "$KVANT" loadgen --url "http://127.0.0.1:$port" "${LG[@]}" "${INJ[@]}" "$@" --json-out "$OUT/$name-inject.json" >/dev/null || true
}

port=$(free_port)
echo "== kvant serve -t $THREADS $KVANT_ARGS"
start_kvant "$port" "$OUT/kvant.log" -m "$MODEL" -t "$THREADS" $KVANT_ARGS
measure kvant "$port"
stop_server
names="kvant"
if [ "${SKIP_LLAMA:-0}" = 0 ]; then
  for cfg in default b64; do
    port=$(free_port)
    extra=(); [ $cfg = b64 ] && extra=(-b 64 -ub 64)
    echo "== llama-server -np 9 -c $((9 * 4096)) -t $THREADS ${extra[*]:-}"
    start_llama "$port" "$OUT/llama-$cfg.log" -m "$MODEL" -np 9 -c $((9 * 4096)) -t "$THREADS" "${extra[@]}"
    measure "llama-$cfg" "$port" --extra-body "$LLAMA_EXTRA"
    stop_server
    names="$names llama-$cfg"
  done
fi

# The floor under the long prompt's TTFT on this machine: kvant prefilling
# the 2000 tokens alone, no decoders, no server (kvant bench, one run).
"$KVANT" bench -m "$MODEL" -p 2000 -n 0 -t "$THREADS" -r 1 --json >"$OUT/pp2000.json" 2>/dev/null || true

python3 - "$OUT" $names <<'PY'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
print("\nserver           scenario    ITL p50   ITL p99   ITL max   long-prompt TTFT (ms)   decode tok/s")
for n in names:
    for sc in ("base", "inject"):
        try: j = json.load(open(f"{out}/{n}-{sc}.json"))
        except Exception as e: print("%-16s %-9s  (no result: %s)" % (n, sc, e)); continue
        i = j["itl_ms"]; inj = j.get("inject")
        ttft = "%.0f (%d tokens)" % (inj["ttft_ms"], inj["prompt_tokens"]) if inj else "-"
        print("%-16s %-9s %8.1f %9.1f %9.1f   %-22s %10.1f" % (n, sc, i["p50"], i["p99"], i["max"], ttft, j["output_throughput"]))
try:
    tps = json.load(open(f"{out}/pp2000.json"))["avg_ts"]
    print("floor: kvant prefills the 2000 tokens alone (kvant bench -p 2000, no decoders) in %.0f ms (%.0f tok/s)" % (2000e3 / tps, tps))
except Exception as e:
    print("floor: (kvant bench -p 2000 gave no result: %s)" % e)
print("targets: max inter-token gap <= 200 ms AND long-prompt TTFT <= 2000 ms (kvant, with the injected prompt)")
PY
