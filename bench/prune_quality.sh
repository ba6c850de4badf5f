#!/bin/sh
# bench/prune_quality.sh - perplexity of pruned stories260K per method and
# sparsity (30/50/60/70% unstructured, 2:4, 4:8), as a markdown table and a
# gnuplot PNG of perplexity vs sparsity.
#   usage: bench/prune_quality.sh [BUILD_DIR] [OUT_DIR]
# Evaluation: ../shared/corpora/tinystories_val_subset.txt, c=512, the
# first 100 chunks (llama.cpp's method).  Calibration: the LAST 16384 tokens
# of the same file (kvant prune's default), disjoint from the evaluated
# first 51200 tokens.
set -eu
B=${1:-build}
OUT=${2:-/tmp/prune_quality}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${KVANT_SHARED:-$ROOT/../shared}
M=$SHARED/models/stories260K.gguf
T=$SHARED/corpora/tinystories_val_subset.txt
mkdir -p "$OUT"
ppl() { "$B/kvant" ppl -m "$1" -f "$T" -c 512 --chunks 100 2>&1 | sed -n 's/^PPL = \([0-9.]*\).*/\1/p'; }

DENSE=$(ppl "$M")
# method label | kvant prune options
METHODS="magnitude|--method magnitude
wanda|--method wanda --calib $T --sequential
sparsegpt|--method sparsegpt --calib $T --sequential
sparsegpt-b16|--method sparsegpt --calib $T --sequential --block 16"
CASES="0.3 0.5 0.6 0.7 2:4 4:8"
TSV=$OUT/ppl.tsv
printf 'method' > "$TSV"
for c in $CASES; do printf '\t%s' "$c" >> "$TSV"; done
printf '\n' >> "$TSV"
echo "$METHODS" | while IFS='|' read -r name opts; do
    printf '%s' "$name" >> "$TSV"
    for c in $CASES; do
        case $c in *:*) sp="--pattern $c" ;; *) sp="--sparsity $c" ;; esac
        # shellcheck disable=SC2086
        "$B/kvant" prune "$M" "$OUT/m.gguf" $opts $sp -q
        p=$(ppl "$OUT/m.gguf")
        printf '\t%s' "$p" >> "$TSV"
        echo "$name $c: $p" >&2
    done
    printf '\n' >> "$TSV"
done
echo "dense F32: $DENSE"
echo
awk -F'\t' 'NR==1{printf "| method |"; for(i=2;i<=NF;i++) printf " %s |", ($i ~ /:/ ? $i : $i*100 "%"); printf "\n|---|"; for(i=2;i<=NF;i++) printf "---:|"; printf "\n"; next}
            {printf "| %s |", $1; for(i=2;i<=NF;i++) printf " %s |", $i; printf "\n"}' "$TSV"
# plot: unstructured columns 2..5 vs sparsity
awk -F'\t' -v d="$DENSE" 'NR==1{next} {print "# " $1; print 0, d; print 30, $2; print 50, $3; print 60, $4; print 70, $5; print ""; print ""}' "$TSV" > "$OUT/plot.dat"
gnuplot <<GP
set terminal png size 800,560
set output "$OUT/ppl_vs_sparsity.png"
set title "stories260K: perplexity vs unstructured sparsity (tinystories, c=512, 100 chunks)"
set xlabel "sparsity of the layer matrices (%)"
set ylabel "perplexity (log scale)"
set logscale y
set key left top
plot for [i=0:3] "$OUT/plot.dat" index i using 1:2 with linespoints title word("magnitude wanda sparsegpt sparsegpt-b16", i+1)
GP
echo
echo "plot: $OUT/ppl_vs_sparsity.png"
