#!/bin/sh
# bench/prune_decode_ab.sh - decode tokens/s of model A and model B measured
# alternately (A B A B ...), so load changes on a shared machine hit both;
# prints every run and the best and median of each, and B/A of both.
# usage: bench/prune_decode_ab.sh A.gguf B.gguf [ROUNDS=4] [N_GEN=16] [THREADS=2] [BUILD=build]
set -eu
A=$1; B=$2; R=${3:-4}; N=${4:-16}; TH=${5:-2}; BD=${6:-build}
run() { "$BD/kvant" bench -m "$1" -p 0 -n "$N" -t "$TH" -r 1 2>/dev/null | sed -n "s/.*| tg$N | \([0-9.]*\).*/\1/p"; }
ra=""; rb=""
i=0
while [ $i -lt "$R" ]; do
    a=$(run "$A"); b=$(run "$B")
    echo "round $i: A $a  B $b  (B/A $(echo "$b $a" | awk '{printf "%.2f", $1/$2}'))"
    ra="$ra $a"; rb="$rb $b"; i=$((i + 1))
done
stats() { echo "$1" | tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {m=(NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2; printf "%s %s", v[NR], m}'; }
sa=$(stats "$ra"); sb=$(stats "$rb")
echo "A $A: best $(echo $sa | cut -d' ' -f1) median $(echo $sa | cut -d' ' -f2) t/s"
echo "B $B: best $(echo $sb | cut -d' ' -f1) median $(echo $sb | cut -d' ' -f2) t/s"
echo "$sa $sb" | awk '{printf "B/A: best %.2fx, median %.2fx\n", $3/$1, $4/$2}'
