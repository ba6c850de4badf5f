#!/bin/sh
# bench/depth_speed.sh - decode at depth: kvant vs llama.cpp with its flash
# attention off and on, on the same files (bench/depth_speed.md holds a run).
#
#   bench/depth_speed.sh LLAMA_BIN_DIR [DIR]
#
# DIR (default /tmp/depth-speed) gets SYNTHETIC stories110M and
# tinyllama-1.1b in Q8_0 (`kvant synth`: real shapes, random weights); then
# bench/compare.py --tg-only runs `kvant bench -d D` and `llama-bench -d D
# -fa off|on` interleaved for every depth D, with the bandwidth measured
# beside each row (kvant-stream), F16 K/V for both.  A row's roofline
# counts the weights and the K/V of D + N/2 positions read per token.
# Env: T (threads, 2), N (decode tokens, 32), R (reps, 2), DEPTHS
# (0,2048,8192,16384), MODELS (stories110M tinyllama-1.1b), ROUNDS (1; K > 1:
# every row K times, kvant and llama.cpp alternating, medians).
set -eu
LB=${1:?usage: bench/depth_speed.sh LLAMA_BIN_DIR [DIR]}
D=${2:-/tmp/depth-speed}
K=${KVANT:-build/kvant}
T=${T:-2} N=${N:-32} R=${R:-2} DEPTHS=${DEPTHS:-0,2048,8192,16384} MODELS=${MODELS:-stories110M tinyllama-1.1b}
mkdir -p "$D"
files=""
for s in $MODELS; do
    f="$D/$s-q8_0.gguf"
    [ -f "$f" ] || "$K" synth --shape "$s" --type Q8_0 -o "$f" -t "$T" > /dev/null 2>&1
    files="$files $f"
done
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $T threads; models: SYNTHETIC (random weights) Q8_0, F16 K/V"
"$K" --version | tail -1
# shellcheck disable=SC2086
python3 bench/compare.py --llama-bench "$LB/llama-bench" --kvant "$K" -t "$T" -n "$N" -r "$R" --rounds "${ROUNDS:-1}" --tg-only \
    -d "$DEPTHS" --fa off,on $files
