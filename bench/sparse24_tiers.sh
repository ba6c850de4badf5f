#!/bin/sh
# bench/sparse24_tiers.sh - 2:4 sparse decode against its dense counterpart,
# per kernel tier, beside llama.cpp (bench/sparse24_tiers.md holds a run).
#
#   bench/sparse24_tiers.sh LLAMA_BIN_DIR [DIR]
#
# DIR (default /tmp/s24) gets a SYNTHETIC tinyllama-1.1b in F16 and Q8_0
# (`kvant synth`) and their 2:4 forms (`kvant prune --method magnitude
# --pattern 2:4`, S24_F16 from the F16 file, S24_Q8 from the Q8_0 file);
# then bench/compare.py --tg-only --tiers runs kvant at every tier and
# llama-bench on the dense file of each pair (it cannot read 2:4 types),
# interleaved, with the bandwidth measured beside each row.  Then each 2:4
# file against its dense one in the same runs (`kvant bench --vs`: the two
# stepped token by token, so both see the same memory bandwidth): a table of
# the median (min-max) ratio of PAIRED runs of R2 repetitions per tier and
# pair, tiers and pairs alternating, the meter read after each.  Env: T (2),
# N (32), R (3), TIERS (avx2,avx512; avx2 alone on a CPU without AVX-512),
# ROUNDS (1; K > 1: every row K times alternating, medians), PAIRED (2; 0
# skips the paired table), R2 (10), COMPARE (1; 0 skips compare.py).
set -eu
LB=${1:?usage: bench/sparse24_tiers.sh LLAMA_BIN_DIR [DIR]}
D=${2:-/tmp/s24}
K=${KVANT:-build/kvant}
T=${T:-2} N=${N:-32} R=${R:-3} TIERS=${TIERS:-avx2,avx512}
mkdir -p "$D"
export LD_LIBRARY_PATH="$LB"
for t in F16 Q8_0; do
    [ -f "$D/tinyllama-$t.gguf" ] || "$K" synth --shape tinyllama-1.1b --type "$t" -o "$D/tinyllama-$t.gguf" -t "$T" > /dev/null 2>&1
done
[ -f "$D/tinyllama-S24_F16.gguf" ] || "$K" prune "$D/tinyllama-F16.gguf" "$D/tinyllama-S24_F16.gguf" \
    --method magnitude --pattern 2:4 --format sparse24-f16 -t "$T" > /dev/null 2>&1
[ -f "$D/tinyllama-S24_Q8.gguf" ] || "$K" prune "$D/tinyllama-Q8_0.gguf" "$D/tinyllama-S24_Q8.gguf" \
    --method magnitude --pattern 2:4 --format sparse24-q8 -t "$T" > /dev/null 2>&1
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $T threads; model: SYNTHETIC tinyllama-1.1b (random weights)"
"$K" --version | tail -1
[ "${COMPARE:-1}" = 0 ] || python3 bench/compare.py --llama-bench "$LB/llama-bench" --kvant "$K" -t "$T" -n "$N" -r "$R" --rounds "${ROUNDS:-1}" --tg-only \
    --tiers "$TIERS" "$D/tinyllama-F16.gguf" "$D/tinyllama-S24_F16.gguf=$D/tinyllama-F16.gguf" \
    "$D/tinyllama-Q8_0.gguf" "$D/tinyllama-S24_Q8.gguf=$D/tinyllama-Q8_0.gguf"

P=${PAIRED:-2}
[ "$P" -gt 0 ] || exit 0
echo
echo "2:4 against dense in the same runs (kvant bench -m S24 --vs DENSE -p 0 -n $N -r ${R2:-10} -t $T; median (min-max) of the runs' ratios)"
echo
echo "| round | tier | pair | 2:4 t/s | dense t/s | 2:4 / dense | meter GB/s after |"
echo "|--:|---|---|--:|--:|--:|--:|"
i=1
while [ "$i" -le "$P" ]; do
    for t in $(echo "$TIERS" | tr ',' ' '); do
        for pair in S24_F16:F16 S24_Q8:Q8_0; do
            s=${pair%%:*} d=${pair#*:}
            out=$(KVANT_TIER=$t "$K" bench -m "$D/tinyllama-$s.gguf" --vs "$D/tinyllama-$d.gguf" -p 0 -n "$N" \
                  -r "${R2:-10}" -t "$T" 2>/dev/null | grep "^| ")
            ts=$(echo "$out" | sed -n 3p | awk -F'|' '{print $(NF-1)}' | sed 's/^ *//; s/ *$//')
            td=$(echo "$out" | sed -n 4p | awk -F'|' '{print $(NF-1)}' | sed 's/^ *//; s/ *$//')
            q=$(echo "$out" | sed -n 5p | awk -F'|' '{print $(NF-1)}' | sed 's/^ *//; s/ *$//')
            m=$("$(dirname "$K")/kvant-stream" -t "$T" -r 2 -m 1100 | awk '/^read/ {print $2}')
            echo "| $i | $t | $s / $d | $ts | $td | **$q** | $m |"
        done
    done
    i=$((i + 1))
done
