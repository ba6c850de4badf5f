#!/bin/sh
# bench/prune_speed.sh - prefill / decode speed of pruned models next to
# their dense originals, in one run (kvant bench, llama-bench style):
#   tinyllama-1.1b (synthetic) F16  vs 2:4 magnitude in S24_F16
#   tinyllama-1.1b (synthetic) Q8_0 vs 2:4 magnitude in S24_Q8
#   stories110M    (synthetic) F32  vs structured 25% FFN neurons / 25% heads
# usage: bench/prune_speed.sh [BUILD_DIR] [WORK_DIR] [THREADS]
# Dense inputs: /tmp/m/{tl-F16,tl-Q8_0,s110-F32}.gguf (kvant synth); pruned
# models are made in WORK_DIR when missing.  Figures are synthetic-weight
# throughput only (the text such models write is noise).
set -eu
B=${1:-build}
W=${2:-/tmp/prune_speed}
TH=${3:-2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=${KVANT_SHARED:-$ROOT/../shared}/corpora/tinystories_val_subset.txt
mkdir -p "$W"
mk() { [ -f "$W/$2" ] || "$B/kvant" prune "$1" "$W/$2" -q -t "$TH" $3; }
mk /tmp/m/tl-F16.gguf tl-s24f16.gguf "--method magnitude --pattern 2:4 --format sparse24-f16"
mk /tmp/m/tl-Q8_0.gguf tl-s24q8.gguf "--method magnitude --pattern 2:4 --format sparse24-q8"
mk /tmp/m/s110-F32.gguf s110-ffn25.gguf "--method structured --target ffn --sparsity 0.25 --calib $T --calib-tokens 1024"
mk /tmp/m/s110-F32.gguf s110-heads25.gguf "--method structured --target heads --sparsity 0.25 --calib $T --calib-tokens 1024"
for m in /tmp/m/tl-F16.gguf "$W/tl-s24f16.gguf" /tmp/m/tl-Q8_0.gguf "$W/tl-s24q8.gguf" \
         /tmp/m/s110-F32.gguf "$W/s110-ffn25.gguf" "$W/s110-heads25.gguf"; do
    "$B/kvant" bench -m "$m" -p 128 -n 32 -t "$TH" -r 2 2>/dev/null | grep '^| [a-z]' | grep -v '^| model'
done
