#!/bin/sh
# bench/train_distill.sh - distillation experiment (issue 8): teacher
# stories260K, a student about a quarter of its size, the same data, steps
# and seed for (a) the student trained on hard labels and (b) the distilled
# student at T = 1, 2, 4.  Writes a table (validation loss / perplexity on
# the text's last 10%) and a loss-curve plot (gnuplot PNG).
#   usage: bench/train_distill.sh [OUTDIR]   (env: STEPS, BATCH, CTX, LR, ALPHA, THREADS, TEXT, SEED)
set -eu
KV=${KV:-build/kvant}
OUT=${1:-bench/out/distill}
SH=${SHARED:-../shared}
TEACHER=$SH/models/stories260K.gguf
TEXT=${TEXT:-$SH/corpora/tinystories_val_subset.txt}
STEPS=${STEPS:-400}; BATCH=${BATCH:-8}; CTX=${CTX:-128}; LR=${LR:-2e-3}; ALPHA=${ALPHA:-0.5}
THREADS=${THREADS:-1}; SEED=${SEED:-1337}
STUDENT=${STUDENT:-dim=32,layers=4,heads=4,kv_heads=2,hidden=86}
mkdir -p "$OUT"
COMMON="-f $TEXT --steps $STEPS --batch $BATCH --ctx $CTX --lr $LR --seed $SEED --eval-every 25 --eval-windows 64 -t $THREADS --json"

echo "teacher: $TEACHER; student: $STUDENT; $STEPS steps of $BATCH x $CTX tokens, lr $LR, alpha $ALPHA, seed $SEED" > "$OUT/setup.txt"
$KV train --config "$STUDENT" --tokenizer-from "$TEACHER" $COMMON -o "$OUT/scratch.gguf" --log "$OUT/scratch.csv" > "$OUT/scratch.json"
for T in 1 2 4; do
  $KV distill --teacher "$TEACHER" --student "$STUDENT" --temp $T --alpha $ALPHA $COMMON \
    -o "$OUT/distill_T$T.gguf" --log "$OUT/distill_T$T.csv" > "$OUT/distill_T$T.json"
done

val() { sed -n 's/.*"val_loss": \([0-9.]*\).*"val_ppl": \([0-9.]*\).*/\1 \2/p' "$1"; }
{
  echo "| student | val loss | val ppl |"
  echo "|---|---|---|"
  set -- $(val "$OUT/scratch.json"); echo "| scratch (hard labels) | $1 | $2 |"
  for T in 1 2 4; do set -- $(val "$OUT/distill_T$T.json"); echo "| distilled T=$T, alpha=$ALPHA | $1 | $2 |"; done
} > "$OUT/table.md"
cat "$OUT/setup.txt" "$OUT/table.md"

gnuplot <<GP
set terminal png size 900,560 noenhanced
set output "$OUT/distill_loss.png"
set datafile separator ","
set key autotitle columnhead
set title "student $STUDENT, teacher stories260K, alpha $ALPHA: validation cross-entropy vs step" noenhanced
set xlabel "step"; set ylabel "validation loss (nats/token)"
set yrange [*:*]
plot "$OUT/scratch.csv" every ::2 using 1:(\$3 == 0 ? NaN : \$3) with linespoints title "scratch", \
     for [T in "1 2 4"] "$OUT/distill_T".T.".csv" every ::2 using 1:(\$3 == 0 ? NaN : \$3) with linespoints title "distilled T=".T
GP
echo "plot: $OUT/distill_loss.png"
