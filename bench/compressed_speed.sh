#!/bin/sh
# bench/compressed_speed.sh - decode / prefill speed of every compressed file
# kvant writes beside llama.cpp's nearest type, quantized from the same F16
# file (bench/compressed_speed.md holds a run).
#
#   bench/compressed_speed.sh LLAMA_BIN_DIR [DIR]
#
# DIR (default /tmp/compressed-speed) gets a SYNTHETIC tinyllama-1.1b in F16
# (`kvant synth`: real shape, random weights), kvant's PTQ / W8A8 files of it
# (`kvant quantize`, no clipping or calibration: speed does not depend on
# them) and llama.cpp's types (`llama-quantize --pure`, every matrix in the
# type, as kvant's PTQ files have), then bench/compare.py runs each pair
# interleaved with the bandwidth measured beside every decode row (the
# roofline: read bandwidth / the file's bytes read per token).  Env: T
# (threads, 2), P (prefill tokens, 512), N (decode tokens, 64), R (reps, 3),
# ROUNDS (1; K > 1: every row K times alternating, medians).
set -eu
LB=${1:?usage: bench/compressed_speed.sh LLAMA_BIN_DIR [DIR]}
D=${2:-/tmp/compressed-speed}
K=${KVANT:-build/kvant}
T=${T:-2} P=${P:-512} N=${N:-64} R=${R:-3}
mkdir -p "$D"
export LD_LIBRARY_PATH="$LB"
F="$D/tinyllama-f16.gguf"
[ -f "$F" ] || "$K" synth --shape tinyllama-1.1b --type F16 -o "$F" -t "$T" > /dev/null
ptq() { # name scheme bits granularity
    [ -f "$D/tl-$1.gguf" ] || "$K" quantize "$F" "$D/tl-$1.gguf" --scheme "$2" --bits "$3" --granularity "$4" -q -t "$T"
}
ptq z2g32 zeropoint 2 group:32
ptq z3g32 zeropoint 3 group:32
ptq a4g32 absmax 4 group:32
ptq z4g32 zeropoint 4 group:32
ptq z4g128 zeropoint 4 group:128
ptq z5g32 zeropoint 5 group:32
ptq a6g32 absmax 6 group:32
ptq a8c absmax 8 channel
[ -f "$D/tl-w8a8.gguf" ] || "$K" quantize "$F" "$D/tl-w8a8.gguf" --w8a8 -t "$T" 2> /dev/null
for t in Q2_K Q3_K_S Q4_0 Q4_1 Q5_1 Q6_K Q8_0; do
    [ -f "$D/ll-$t.gguf" ] || "$LB/llama-quantize" --pure "$F" "$D/ll-$t.gguf" "$t" "$T" > /dev/null 2>&1
done
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $T threads; model: SYNTHETIC tinyllama-1.1b (random weights)"
python3 bench/compare.py --llama-bench "$LB/llama-bench" --kvant "$K" -t "$T" -p "$P" -n "$N" -r "$R" --rounds "${ROUNDS:-1}" \
    "$D/tl-z2g32.gguf=$D/ll-Q2_K.gguf" "$D/tl-z3g32.gguf=$D/ll-Q3_K_S.gguf" \
    "$D/tl-a4g32.gguf=$D/ll-Q4_0.gguf" "$D/tl-z4g32.gguf=$D/ll-Q4_1.gguf" "$D/tl-z4g128.gguf=$D/ll-Q4_1.gguf" \
    "$D/tl-z5g32.gguf=$D/ll-Q5_1.gguf" "$D/tl-a6g32.gguf=$D/ll-Q6_K.gguf" "$D/tl-a8c.gguf=$D/ll-Q8_0.gguf" \
    "$D/tl-w8a8.gguf=$D/ll-Q8_0.gguf" "$F"
