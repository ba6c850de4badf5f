#!/bin/sh
# bench/tier_speed.sh - every weight type at kvant's AVX2 and AVX-512 tiers
# beside llama.cpp on the same file (bench/tier_speed.md holds a run).
#
#   bench/tier_speed.sh LLAMA_BIN_DIR [DIR]
#
# DIR (default /tmp/tier-speed) gets a SYNTHETIC tinyllama-1.1b in F16
# (`kvant synth`) and llama.cpp's types of it (`llama-quantize --pure`), then
# bench/compare.py --tiers avx2,avx512 runs kvant bench at both tiers
# (KVANT_TIER) and llama-bench, interleaved, pp and tg, with the decode
# roofline from the bandwidth measured beside each row.  KVANT_TIER=avx512
# is refused on a CPU without AVX-512: there set TIERS=avx2 (one kvant
# column, beside llama.cpp).  Env: T (2), P (512), N (128), R (2),
# TIERS (avx2,avx512), TYPES (F16 BF16 Q8_0 Q6_K Q4_K_M Q4_0 Q3_K_S Q2_K),
# ROUNDS (1; K > 1: every row K times alternating, medians).
set -eu
LB=${1:?usage: bench/tier_speed.sh LLAMA_BIN_DIR [DIR]}
D=${2:-/tmp/tier-speed}
K=${KVANT:-build/kvant}
T=${T:-2} P=${P:-512} N=${N:-128} R=${R:-2} TIERS=${TIERS:-avx2,avx512} TYPES=${TYPES:-F16 BF16 Q8_0 Q6_K Q4_K_M Q4_0 Q3_K_S Q2_K}
mkdir -p "$D"
export LD_LIBRARY_PATH="$LB"
F="$D/tinyllama-F16.gguf"
[ -f "$F" ] || "$K" synth --shape tinyllama-1.1b --type F16 -o "$F" -t "$T" > /dev/null 2>&1
files=""
for t in $TYPES; do
    f="$D/tinyllama-$t.gguf"
    [ -f "$f" ] || "$LB/llama-quantize" --pure "$F" "$f" "$t" "$T" > /dev/null 2>&1
    files="$files $f"
done
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $T threads; model: SYNTHETIC tinyllama-1.1b (random weights)"
"$K" --version | tail -1
# shellcheck disable=SC2086
python3 bench/compare.py --llama-bench "$LB/llama-bench" --kvant "$K" -t "$T" -p "$P" -n "$N" -r "$R" --rounds "${ROUNDS:-1}" \
    --tiers "$TIERS" $files
