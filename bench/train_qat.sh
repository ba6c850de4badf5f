#!/bin/sh
# bench/train_qat.sh - QAT vs PTQ vs F32 on stories260K (issue 8).
# For each bit width: PTQ with the PTQ tool (kvant quantize --scheme ...),
# QAT fine-tuned from F32 with the same quantizer and format (kvant qat),
# all measured with kvant ppl on the validation part (the last 10% of the
# text, from a line start - the part training never sees).  Also the F32
# model fine-tuned with the same steps (kvant train -m), to show what the
# fine-tuning alone buys.
#   usage: bench/train_qat.sh [OUTDIR]   (env: BITS, GRAN, SCHEME, STEPS, LR, THREADS, CTX_PPL)
set -eu
KV=${KV:-build/kvant}
OUT=${1:-bench/out/qat}
SH=${SHARED:-../shared}
MODEL=$SH/models/stories260K.gguf
TEXT=${TEXT:-$SH/corpora/tinystories_val_subset.txt}
BITS=${BITS:-3 2}; GRAN=${GRAN:-group:32}; SCHEME=${SCHEME:-zeropoint}
STEPS=${STEPS:-200}; LR=${LR:-5e-4}; THREADS=${THREADS:-1}; CTX_PPL=${CTX_PPL:-256}
mkdir -p "$OUT"
python3 - "$TEXT" "$OUT/val.txt" <<'PY'
import sys
s = open(sys.argv[1], 'rb').read()
off = len(s) - len(s) // 10
while 0 < off < len(s) and s[off - 1:off] != b'\n':
    off += 1
open(sys.argv[2], 'wb').write(s[off:])
PY
ppl() { $KV ppl -m "$1" -f "$OUT/val.txt" -c $CTX_PPL -t $THREADS 2>&1 | sed -n 's/^PPL = \([0-9.]*\).*/\1/p'; }
COMMON="-f $TEXT --steps $STEPS --lr $LR --wd 0 --batch 8 --ctx 128 --eval-every 50 -t $THREADS"
F32=$(ppl "$MODEL")
$KV train -m "$MODEL" $COMMON -o "$OUT/f32_ft.gguf" > /dev/null 2> "$OUT/f32_ft.log"
F32FT=$(ppl "$OUT/f32_ft.gguf")
{
  echo "stories260K, $SCHEME $GRAN, QAT $STEPS steps of 8 x 128 tokens (lr $LR), ppl: kvant ppl -c $CTX_PPL on the validation part"
  echo "F32 fine-tuned with the same steps: $F32FT"
  echo ""
  echo "| bits | F32 | PTQ | QAT | gap closed |"
  echo "|---|---|---|---|---|"
} > "$OUT/table.md"
for B in $BITS; do
  $KV quantize "$MODEL" "$OUT/ptq_b$B.gguf" --scheme $SCHEME --bits $B --granularity $GRAN -q 2> "$OUT/ptq_b$B.log"
  $KV qat -m "$MODEL" $COMMON --bits $B --granularity $GRAN --scheme $SCHEME -o "$OUT/qat_b$B.gguf" \
    --log "$OUT/qat_b$B.csv" > /dev/null 2> "$OUT/qat_b$B.log"
  P=$(ppl "$OUT/ptq_b$B.gguf"); Q=$(ppl "$OUT/qat_b$B.gguf")
  G=$(python3 -c "print('%.1f%%' % (100 * ($P - $Q) / ($P - $F32)))")
  echo "| $B | $F32 | $P | $Q | $G |" >> "$OUT/table.md"
done
cat "$OUT/table.md"
