#!/bin/sh
# bench/train_prune.sh - iterative magnitude pruning with fine-tuning vs
# one-shot Wanda and SparseGPT at the same unstructured sparsity on
# stories260K (issue 8).  Calibration for the one-shot methods: the
# training part of the text (the validation part is never seen); ppl:
# kvant ppl on the validation part.
#   usage: bench/train_prune.sh [OUTDIR]
#   env: SPARSITY (0.7), ROUNDS (4), FT (fine-tune steps per round, 50), LR, THREADS,
#        PRUNE_KV (a kvant with `kvant prune`, default $KV)
set -eu
KV=${KV:-build/kvant}
PRUNE_KV=${PRUNE_KV:-$KV}
OUT=${1:-bench/out/prune}
SH=${SHARED:-../shared}
MODEL=$SH/models/stories260K.gguf
TEXT=${TEXT:-$SH/corpora/tinystories_val_subset.txt}
SPARSITY=${SPARSITY:-0.7}; ROUNDS=${ROUNDS:-4}; FT=${FT:-50}; LR=${LR:-5e-4}; THREADS=${THREADS:-1}; CTX_PPL=${CTX_PPL:-256}
mkdir -p "$OUT"
python3 - "$TEXT" "$OUT/train.txt" "$OUT/val.txt" <<'PY'
import sys
s = open(sys.argv[1], 'rb').read()
off = len(s) - len(s) // 10
while 0 < off < len(s) and s[off - 1:off] != b'\n':
    off += 1
open(sys.argv[2], 'wb').write(s[:off])
open(sys.argv[3], 'wb').write(s[off:])
PY
ppl() { $KV ppl -m "$1" -f "$OUT/val.txt" -c $CTX_PPL -t $THREADS 2>&1 | sed -n 's/^PPL = \([0-9.]*\).*/\1/p'; }
for M in wanda sparsegpt; do
  $PRUNE_KV prune "$MODEL" "$OUT/$M.gguf" --method $M --sparsity $SPARSITY --calib "$OUT/train.txt" -t $THREADS -q \
    2> "$OUT/$M.log"
done
$KV train -m "$MODEL" -f "$TEXT" --prune $SPARSITY --prune-rounds $ROUNDS --prune-finetune-steps $FT --lr $LR --wd 0 \
  --batch 8 --ctx 128 --eval-every $FT -t $THREADS -o "$OUT/iterative.gguf" --log "$OUT/iterative.csv" 2> "$OUT/iterative.log"
{
  echo "stories260K at $SPARSITY unstructured sparsity of the layer matrices; ppl: kvant ppl -c $CTX_PPL on the validation part"
  echo "iterative: $ROUNDS rounds of magnitude pruning (cubic schedule), $FT fine-tuning steps of 8 x 128 tokens each (lr $LR)"
  echo ""
  echo "| model | val ppl |"
  echo "|---|---|"
  echo "| F32 dense | $(ppl "$MODEL") |"
  echo "| one-shot Wanda | $(ppl "$OUT/wanda.gguf") |"
  echo "| one-shot SparseGPT | $(ppl "$OUT/sparsegpt.gguf") |"
  echo "| iterative magnitude + fine-tuning | $(ppl "$OUT/iterative.gguf") |"
} > "$OUT/table.md"
cat "$OUT/table.md"
