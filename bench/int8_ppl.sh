#!/bin/sh
# bench/int8_ppl.sh - perplexity of stories260K under INT8 inference:
# F32, plain W8A8, LLM.int8, SmoothQuant W8A8 and its alpha sweep, then the
# same with synthetic outliers (x20 on hidden dims 7 and 40, a
# function-preserving transform).  llama.cpp's method: c=512, first 100
# chunks of the TinyStories subset.  SmoothQuant calibrates on 4096 tokens
# taken from byte 600000 on (the 100 evaluated chunks end near byte 103000).
# usage: bench/int8_ppl.sh [KVANT_BIN] [MODEL] [TEXT]
set -e
K=${1:-build/kvant}
M=${2:-../shared/models/stories260K.gguf}
F=${3:-../shared/corpora/tinystories_val_subset.txt}
CAL="--calib $F --calib-skip 600000 --calib-tokens 4096"
ppl() { printf '%-44s ' "$1"; shift; $K ppl -m $M -f $F -c 512 --chunks 100 --json "$@" 2>/dev/null |
        sed -E 's/.*"ppl": ([0-9.]+), "ppl_err": ([0-9.]+).*"seconds": ([0-9.]+).*/PPL \1 +\/- \2  (\3 s)/'; }
for inj in "" "--inject-outliers 7,40"; do
  [ -n "$inj" ] && echo "== synthetic outliers: $inj (x20)" || echo "== stories260K as is"
  ppl "F32" $inj --int8-mode f32
  ppl "W8A8 (per-token x per-channel, no smoothing)" $inj --w8a8
  ppl "LLM.int8 (threshold 6)" $inj --int8-mixed
  for a in 0.0 0.25 0.5 0.75 0.9 1.0; do
    ppl "SmoothQuant W8A8 alpha $a" $inj --smoothquant --alpha $a $CAL
  done
  ppl "SmoothQuant W8A8 alpha 0.5, wo smoothed too" $inj --smooth-wo --alpha 0.5 $CAL
done
