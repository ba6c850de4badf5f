#!/usr/bin/env bash
# bench/soak.sh - kvant serve under a mixed, hostile load for a fixed time,
# then drained and stopped with SIGTERM while requests are in flight.  It
# prints what it checks and exits 1 when a check fails:
#   - every request sent got exactly one outcome, counted by the client per
#     kind (ok, client_error, queue_full, server_error, cancelled, broken: no
#     clean answer) and each kind got only the outcomes it may get;
#   - the client's totals equal /metrics' kvant_requests_total{outcome=...}
#     (see "disconnects" below);
#   - the server stayed up (its pid alive until the SIGTERM, no sanitizer or
#     assertion text in its log);
#   - greedy probes sent during the load give the text they gave alone before;
#   - after the load: kvant_kv_blocks_used 0, kvant_num_requests_running 0,
#     kvant_num_requests_waiting 0; preemptions happened (the small pool);
#   - VmRSS at the end within max(5 %, 2 MiB) of VmRSS after the warm-up
#     (both measured idle, after a drain);
#   - SIGTERM with requests in flight: exit status 0, and every in-flight
#     request got a complete 200 answer (finish_reason length/stop, or
#     "abort" when the 10 s grace ran out; streams end with [DONE]).
#
# The load, for the whole time (warm-up included):
#   kvant loadgen x4: streamed completions; streamed chats with n=2; long
#     prompts of 380 random token ids (a 0.75 MiB KV pool: preemption);
#     streams the client abandons at random (--disconnect);
#   curl loops: non-streamed completions; chats with n=3 at temperature 0.8;
#     malformed JSON; an unknown field; n=17 (over the limit of 16); a body
#     over --max-body (413); streams and non-streamed completions cut by
#     curl --max-time (client disconnects); bursts of 50 requests at once
#     beyond --max-seqs + --max-queue (429); greedy probes; /metrics scrapes.
#
# Disconnects: a request the client abandons is cancelled on the server,
# unless the server had already written its whole response to the socket
# when the client closed (then the server counts ok and the client
# cancelled: it cannot know).  So the check is: server ok + cancelled ==
# client ok + cancelled exactly, and 0 <= server ok - client ok <= client
# cancelled; the difference is printed as "delivered before the hang-up".
#
# Loopback only; needs curl and the kvant binary, nothing else.
#
#   bench/soak.sh [--minutes M] [--seconds S] [--kvant PATH] [--server PATH] [--model FILE]
#     --minutes M   load time (default 10; CI: 2); --seconds S overrides it
#     --kvant PATH  the binary (default $KVANT or build/kvant)
#     --server PATH the kvant that serves (default: --kvant's), e.g. an older
#                   build soaked with this one's loadgen
#     --model FILE  a model (default: the built-in stories260K)
set -uo pipefail
cd "$(dirname "$0")/.."
KVANT=${KVANT:-build/kvant}
SECS=600
MODEL=()
SERVE_BIN=""
while [ $# -gt 0 ]; do
  case $1 in
    --minutes) SECS=$(( $2 * 60 )); shift 2 ;;
    --seconds) SECS=$2; shift 2 ;;
    --kvant) KVANT=$2; shift 2 ;;
    --server) SERVE_BIN=$2; shift 2 ;;
    --model) MODEL=(-m "$2"); shift 2 ;;
    -h|--help) sed -n '/^set -uo/q; 2,$s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "soak.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -x "$KVANT" ] || { echo "soak.sh: $KVANT is not an executable (pass --kvant PATH)" >&2; exit 2; }
SERVE_BIN=${SERVE_BIN:-$KVANT}
command -v curl >/dev/null || { echo "soak.sh: needs curl" >&2; exit 2; }

W=$(mktemp -d "${TMPDIR:-/tmp}/kvant-soak.XXXXXX")
OUT=$W/outcomes            # one line per request: KIND HTTP-CODE OUTCOME
: >"$OUT"
FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }
SERVER_PID=""
BG=()
cleanup() {
  for p in "${BG[@]}"; do kill "$p" 2>/dev/null; done
  [ -n "$SERVER_PID" ] && kill -KILL "$SERVER_PID" 2>/dev/null
  [ "${KEEP:-0}" = 1 ] || rm -rf "$W"
}
trap cleanup EXIT

# ---- the server: a small pool (preemption), a small queue (429), small bodies (413)
MAX_SEQS=16 MAX_QUEUE=16 MAX_BODY=65536
"$SERVE_BIN" serve "${MODEL[@]}" --port 0 -q -t 2 -c 512 --kv-mem 0.75 --max-seqs $MAX_SEQS \
  --max-queue $MAX_QUEUE --max-body $MAX_BODY >"$W/server.log" 2>&1 &
SERVER_PID=$!
PORT=""
for _ in $(seq 200); do
  PORT=$(sed -n 's|.* on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$W/server.log" | head -n 1)
  [ -n "$PORT" ] && curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
  kill -0 "$SERVER_PID" 2>/dev/null || break
  PORT=""
  sleep 0.1
done
[ -n "$PORT" ] || { echo "kvant serve did not start:"; cat "$W/server.log"; exit 1; }
B=http://127.0.0.1:$PORT
J='Content-Type: application/json'

metrics() { curl -s -m 10 "$B/metrics"; }
mval() { # NAME [METRICS-TEXT]: the value of one sample (0 when absent)
  local t=${2:-$(metrics)}
  awk -v n="$1" '$1 == n { v = $2 } END { printf "%d\n", v + 0 }' <<<"$t"
}
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$SERVER_PID/status"; }

# one request with curl; appends "KIND CODE OUTCOME" to $OUT.
# req KIND STREAM(0|1) MAXTIME PATH BODY|@FILE
req() {
  local kind=$1 stream=$2 mt=$3 path=$4 body=$5 f code rc out
  f=$(mktemp "$W/body.XXXXXX")
  local data=(--data-binary "$body")
  code=$(curl -s -o "$f" -w '%{http_code}' -m "$mt" ${stream:+-N} -H "$J" -X POST "$B$path" "${data[@]}")
  rc=$?
  if [ $rc = 28 ]; then out=cancelled        # our --max-time: a client disconnect
  elif [ $rc != 0 ]; then out=broken_rc$rc
  elif [ "$code" = 200 ]; then
    if grep -q '"finish_reason":"abort"' "$f"; then out=cancelled
    elif [ "$stream" = 1 ]; then grep -q '^data: \[DONE\]' "$f" && out=ok || out=broken_no_done
    else grep -q '"finish_reason":"' "$f" && out=ok || out=broken_body; fi
  elif [ "$code" = 429 ]; then out=queue_full
  elif [ "${code:0:1}" = 5 ]; then out=server_error
  elif [ "${code:0:1}" = 4 ]; then out=client_error
  else out=broken_http$code; fi
  echo "$kind $code $out" >>"$OUT"
  if [ "$kind" = greedy ] && [ "$out" = ok ]; then choices "$f" >"$f.c"
    cmp -s "$f.c" "$W/greedy.alone" || { echo "greedy text differs:"; cat "$f.c"; } >>"$W/greedy.diff"
  fi
  rm -f "$f" "$f.c"
}
choices() { sed -e 's/.*"choices":\(.*\),"usage".*/\1/' "$1"; } # the choices of a response (not id/created)

GREEDY='{"prompt":"Once upon a time, there was a little dog","max_tokens":48,"temperature":0,"n":2}'
# the greedy probe alone, before any load (twice: alone is stable too)
curl -s -H "$J" "$B/v1/completions" -d "$GREEDY" >"$W/g1"
curl -s -H "$J" "$B/v1/completions" -d "$GREEDY" >"$W/g2"
choices "$W/g1" >"$W/greedy.alone"
choices "$W/g2" | cmp -s - "$W/greedy.alone" || fail "the greedy probe alone is not stable"
grep -q '"finish_reason":"length"' "$W/g1" || fail "the greedy probe alone failed: $(head -c 300 "$W/g1")"
echo "greedy probe alone: $(head -c 160 "$W/greedy.alone")..."

T0=$(date +%s)
WARM=$(( SECS / 10 > 15 ? SECS / 10 : 15 ))
[ $WARM -lt $SECS ] || WARM=$(( SECS / 2 ))
END=$(( T0 + SECS ))
running() { [ "$(date +%s)" -lt "$END" ]; }

# ---- load: kvant loadgen x4 (each writes its JSON summary)
# --backoff: a loadgen that got a 429 waits a little, instead of a storm of 429s
LG=("$KVANT" loadgen --url "$B" -n 200000 --duration "$SECS" --timeout $(( SECS + 120 )) --backoff 100 --json)
"${LG[@]}" -c 4 --max-tokens 32 --prompt-words 30 --seed 1 >"$W/lg_stream.json" 2>"$W/lg_stream.err" & BG+=($!)
"${LG[@]}" -c 2 --endpoint chat --max-tokens 24 --prompt-words 20 --extra-body '{"n":2}' --seed 2 \
  >"$W/lg_chat_n2.json" 2>"$W/lg_chat_n2.err" & BG+=($!)
"${LG[@]}" -c 3 --prompt-tokens 380 --vocab 512 --max-tokens 64 --seed 3 >"$W/lg_long.json" 2>"$W/lg_long.err" & BG+=($!)
"${LG[@]}" -c 3 --max-tokens 160 --prompt-words 20 --disconnect 0.6 --seed 4 >"$W/lg_disc.json" 2>"$W/lg_disc.err" & BG+=($!)
LG_PIDS=("${BG[@]}")

# ---- load: curl loops
big=$W/big.json
{ printf '{"prompt":"'; head -c $(( MAX_BODY + 40000 )) /dev/zero | tr '\0' 'a'; printf '","max_tokens":4}'; } >"$big"
loop() { # KIND SLEEP CMD...: repeat until the end of the load
  local kind=$1 pause=$2; shift 2
  while running; do "$@"; sleep "$pause"; done
}
# A stream the client closes once it has read 200..2199 bytes (1..12 chunks):
# it was admitted, so the server must count it cancelled (or ok when it had
# already written it all).  One that got a 429 or an error first ends before
# head's count and is classified by its status.
disc_stream() {
  local f=$W/ds.$BASHPID code rc out
  curl -s -N -D "$f.h" -m 60 -H "$J" "$B/v1/completions" \
    -d '{"prompt":"The cat","max_tokens":450,"ignore_eos":true,"stream":true}' | head -c $(( RANDOM % 2000 + 200 )) >"$f"
  rc=${PIPESTATUS[0]}
  code=$(sed -n '1s/^HTTP[^ ]* \([0-9]*\).*/\1/p' "$f.h")
  if [ "$code" = 200 ] && { [ "$rc" = 23 ] || ! grep -q '^data: \[DONE\]' "$f"; }; then out=cancelled
  elif [ "$rc" != 0 ]; then out=broken_rc$rc
  elif [ "$code" = 200 ]; then out=ok
  elif [ "$code" = 429 ]; then out=queue_full
  elif [ "${code:0:1}" = 5 ]; then out=server_error
  elif [ "${code:0:1}" = 4 ]; then out=client_error
  else out=broken_http$code; fi
  echo "disc_stream ${code:-000} $out" >>"$OUT"
  rm -f "$f" "$f.h"
}
# A non-streamed completion the client gives up on after 0.5..1.5 s (500
# tokens take longer under this load); the server has long answered a 429
# by then, so a cut one was in the engine and must be counted cancelled.
disc_block() {
  local ms=$(( RANDOM % 1000 + 500 ))
  req disc_block "" "$(( ms / 1000 )).$(printf '%03d' $(( ms % 1000 )))" /v1/completions '{"prompt":"The dog","max_tokens":500,"ignore_eos":true}'
}
burst() {
  local i
  for i in $(seq 50); do req burst "" 60 /v1/completions '{"prompt":"A burst","max_tokens":16}' & done
  wait
}
scrape() { metrics >"$W/m.last" && echo scrape >>"$W/scrapes"; }
loop block 0.05 req block "" 60 /v1/completions '{"prompt":"Tom and Sue went","max_tokens":24,"temperature":0.7}' & BG+=($!)
loop chat_n3 0.05 req chat_n3 "" 60 /v1/chat/completions '{"messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":20,"n":3,"temperature":0.8}' & BG+=($!)
loop malformed 0.2 req malformed "" 30 /v1/completions '{"prompt":' & BG+=($!)
loop unknown_field 0.2 req unknown_field "" 30 /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"frobnicate":1}' & BG+=($!)
loop over_n 0.2 req over_n "" 30 /v1/completions '{"prompt":"hi","n":17}' & BG+=($!)
loop oversized 0.5 req oversized "" 30 /v1/completions "@$big" & BG+=($!)
loop disc_stream 0.1 disc_stream & BG+=($!)
loop disc_block 0.1 disc_block & BG+=($!)
loop burst 8 burst & BG+=($!)
loop greedy 1 req greedy "" 120 /v1/completions "$GREEDY" & BG+=($!)
loop scrape 2 scrape & BG+=($!)

drain() { # wait until the engine is idle and every outcome is counted; prints the metrics
  local t m
  for _ in $(seq 300); do
    m=$(metrics)
    t=$(( $(mval kvant_num_requests_running "$m") + $(mval kvant_num_requests_waiting "$m") ))
    [ "$t" = 0 ] && [ "$(mval kvant_kv_blocks_used "$m")" = 0 ] && break
    sleep 0.1
  done
  sleep 0.5
  metrics
}

# ---- warm-up: the same load; RSS taken at a quiet moment after it
sleep "$WARM"
kill -STOP "${LG_PIDS[@]}" 2>/dev/null # pause the loadgens; the curl loops keep going (little memory)
# a quiet moment: wait for the engine to be idle for a beat (curl loops stay light)
for _ in $(seq 100); do
  m=$(metrics)
  [ "$(mval kvant_num_requests_running "$m")" = 0 ] && break
  sleep 0.05
done
RSS_WARM=$(rss_kib)
kill -CONT "${LG_PIDS[@]}" 2>/dev/null
echo "warm-up ${WARM} s done: VmRSS $RSS_WARM KiB; load continues to $SECS s"

# ---- the rest of the load, watching that the server stays up
ALIVE=1
while running; do
  kill -0 "$SERVER_PID" 2>/dev/null || { ALIVE=0; break; }
  sleep 1
done
[ $ALIVE = 1 ] || fail "kvant serve died during the load"
for p in "${LG_PIDS[@]}"; do wait "$p"; done   # loadgens stop at --duration
for p in "${BG[@]}"; do wait "$p" 2>/dev/null; done
BG=()
T_LOAD=$(( $(date +%s) - T0 ))
M=$(drain)
# the same quiet state as the warm-up's measurement
RSS_END=$(rss_kib)

# ---- client counts
lgnum() { sed -n "s/^[[:space:]]*\"$2\":[[:space:]]*\([0-9]*\).*/\1/p" "$W/lg_$1.json" | head -n 1; }
lgcode() { # FILE CODE: requests loadgen saw with that status
  sed -n '/"http_errors"/,/}/p' "$W/lg_$1.json" | sed -n "s/^[[:space:]]*\"$2\":[[:space:]]*\([0-9]*\).*/\1/p" | head -n 1
}
declare -A C=()   # C[kind,outcome]
KINDS=()
for lg in stream chat_n2 long disc; do
  [ -s "$W/lg_$lg.json" ] || { fail "loadgen $lg wrote no summary: $(tail -n 3 "$W/lg_$lg.err")"; continue; }
  k=lg_$lg
  KINDS+=("$k")
  started=$(lgnum $lg started); ok=$(lgnum $lg completed); disc=$(lgnum $lg disconnected)
  tr_err=$(lgnum $lg transport_errors); q=$(lgcode $lg 429)
  C[$k,ok]=$ok; C[$k,cancelled]=$disc; C[$k,queue_full]=${q:-0}; C[$k,broken]=$tr_err
  other=$(( started - ok - disc - ${q:-0} - tr_err ))
  C[$k,client_error]=0; C[$k,server_error]=0
  [ $other = 0 ] || { C[$k,broken]=$(( tr_err + other )); fail "loadgen $lg: $other requests got another HTTP status: $(sed -n '/"http_errors"/,/}/p' "$W/lg_$lg.json" | tr -d '\n\t ')"; }
  [ "$tr_err" = 0 ] || fail "loadgen $lg: $tr_err requests without a clean answer ($(sed -n 's/.*"first_error":[[:space:]]*"\(.\{0,120\}\).*/\1/p' "$W/lg_$lg.json"))"
  C[$k,sent]=$started
done
for k in block chat_n3 malformed unknown_field over_n oversized disc_stream disc_block burst greedy; do
  KINDS+=("$k")
  C[$k,sent]=$(awk -v k=$k '$1 == k' "$OUT" | wc -l)
  for o in ok client_error queue_full server_error cancelled; do
    C[$k,$o]=$(awk -v k=$k -v o=$o '$1 == k && $3 == o' "$OUT" | wc -l)
  done
  C[$k,broken]=$(awk -v k=$k '$1 == k && $3 ~ /^broken/' "$OUT" | wc -l)
done
# what each kind may get
allow() { # KIND OUTCOMES...: any other outcome fails
  local k=$1 o n; shift
  for o in ok client_error queue_full server_error cancelled broken; do
    [[ " $* " == *" $o "* ]] && continue
    n=${C[$k,$o]:-0}
    [ "$n" = 0 ] || fail "$k: $n requests got outcome $o ($(awk -v k=$k -v o=$o '$1 == k && ($3 == o || (o == "broken" && $3 ~ /^broken/)) { print $2, $3 }' "$OUT" | sort | uniq -c | head -n 3 | tr '\n' ';'))"
  done
}
allow lg_stream ok queue_full; allow lg_chat_n2 ok queue_full; allow lg_long ok queue_full
allow lg_disc ok queue_full cancelled
allow block ok queue_full; allow chat_n3 ok queue_full; allow greedy ok queue_full; allow burst ok queue_full
allow malformed client_error; allow unknown_field client_error; allow over_n client_error; allow oversized client_error
allow disc_stream ok queue_full cancelled; allow disc_block ok queue_full cancelled
for k in malformed unknown_field over_n; do
  n=$(awk -v k=$k '$1 == k && $2 != 400' "$OUT" | wc -l); [ "$n" = 0 ] || fail "$k: $n answers were not 400"
done
n=$(awk '$1 == "oversized" && $2 != 413' "$OUT" | wc -l); [ "$n" = 0 ] || fail "oversized: $n answers were not 413"
[ "${C[burst,queue_full]}" -gt 0 ] || fail "the bursts never went beyond the queue (no 429)"
# (a fast machine may finish 500 tokens before every cut: then say so)
[ "${C[disc_block,cancelled]}" -gt 0 ] || echo "WARN: no non-streamed request was cut by its client"
[ "${C[lg_disc,cancelled]:-0}" -gt 0 ] || fail "loadgen --disconnect abandoned no stream"

printf '\n%-14s %7s %7s %12s %10s %12s %9s %7s\n' kind sent ok client_error queue_full server_error cancelled broken
declare -A T=()
for k in "${KINDS[@]}"; do
  printf '%-14s %7d %7d %12d %10d %12d %9d %7d\n' "$k" "${C[$k,sent]}" "${C[$k,ok]}" "${C[$k,client_error]}" \
    "${C[$k,queue_full]}" "${C[$k,server_error]}" "${C[$k,cancelled]}" "${C[$k,broken]}"
  sum=0
  for o in ok client_error queue_full server_error cancelled broken; do
    T[$o]=$(( ${T[$o]:-0} + ${C[$k,$o]} )); sum=$(( sum + ${C[$k,$o]} ))
  done
  T[sent]=$(( ${T[sent]:-0} + ${C[$k,sent]} ))
  [ "$sum" = "${C[$k,sent]}" ] || fail "$k: $sum outcomes for ${C[$k,sent]} requests sent"
done
printf '%-14s %7d %7d %12d %10d %12d %9d %7d\n' TOTAL "${T[sent]}" "${T[ok]}" "${T[client_error]}" "${T[queue_full]}" \
  "${T[server_error]}" "${T[cancelled]}" "${T[broken]}"

# ---- server counts
S_OK=$(mval 'kvant_requests_total{outcome="ok"}' "$M")
S_CE=$(mval 'kvant_requests_total{outcome="client_error"}' "$M")
S_QF=$(mval 'kvant_requests_total{outcome="queue_full"}' "$M")
S_SE=$(mval 'kvant_requests_total{outcome="server_error"}' "$M")
S_CA=$(mval 'kvant_requests_total{outcome="cancelled"}' "$M")
C_OK=$(( T[ok] + 2 ))  # + the two greedy probes sent alone
printf '%-14s %7s %7d %12d %10d %12d %9d\n' "server" "" "$S_OK" "$S_CE" "$S_QF" "$S_SE" "$S_CA"
echo "(client ok includes the 2 greedy probes sent alone before the load: $C_OK)"
[ "$S_CE" = "${T[client_error]}" ] || fail "client_error: server $S_CE, client ${T[client_error]}"
[ "$S_QF" = "${T[queue_full]}" ] || fail "queue_full: server $S_QF, client ${T[queue_full]}"
[ "$S_SE" = "${T[server_error]}" ] || fail "server_error: server $S_SE, client ${T[server_error]}"
RACE=$(( S_OK - C_OK ))
[ $(( S_OK + S_CA )) = $(( C_OK + T[cancelled] )) ] ||
  fail "ok + cancelled: server $(( S_OK + S_CA )), client $(( C_OK + T[cancelled] ))"
[ $RACE -ge 0 ] && [ $RACE -le "${T[cancelled]}" ] || fail "server ok $S_OK vs client ok $C_OK"
echo "client cancels the server had already delivered before the hang-up: $RACE of ${T[cancelled]}"
[ "${T[broken]}" = 0 ] || fail "${T[broken]} requests got no clean answer"

# ---- greedy
if [ -s "$W/greedy.diff" ]; then fail "greedy probes differ from alone:"; head -c 2000 "$W/greedy.diff"; echo; fi
echo "greedy probes during the load: ${C[greedy,ok]} equal to alone (of ${C[greedy,sent]} sent)"

# ---- engine state after the load
USED=$(mval kvant_kv_blocks_used "$M"); RUN=$(mval kvant_num_requests_running "$M")
WAIT=$(mval kvant_num_requests_waiting "$M"); PRE=$(mval kvant_preemptions_total "$M")
TOTAL_BLOCKS=$(mval kvant_kv_blocks_total "$M")
echo "after the drain: kv_blocks_used $USED of $TOTAL_BLOCKS, running $RUN, waiting $WAIT; preemptions $PRE; /metrics scraped $(wc -l <"$W/scrapes" 2>/dev/null || echo 0) times"
[ "$USED" = 0 ] || fail "$USED KV blocks still used after the load"
[ "$RUN" = 0 ] && [ "$WAIT" = 0 ] || fail "sequences left after the load: running $RUN, waiting $WAIT"
[ "$PRE" -gt 0 ] || fail "no preemption happened (the long prompts should force some)"

# ---- RSS
LIM=$(( RSS_WARM / 20 > 2048 ? RSS_WARM / 20 : 2048 ))
echo "VmRSS after warm-up $RSS_WARM KiB, at the end $RSS_END KiB (growth $(( RSS_END - RSS_WARM )) KiB, limit $LIM KiB = max(5 %, 2 MiB))"
[ $(( RSS_END - RSS_WARM )) -le $LIM ] || fail "RSS grew by $(( RSS_END - RSS_WARM )) KiB"

# ---- SIGTERM with requests in flight
inflight() { # N STREAM BODY
  local f=$W/inflight.$1 code rc
  code=$(curl -s -o "$f" -w '%{http_code}' -m 60 ${2:+-N} -H "$J" "$B${4:-/v1/completions}" -d "$3"); rc=$?
  echo "$rc $code" >"$f.st"
}
inflight 1 1 '{"prompt":"Once","max_tokens":300,"ignore_eos":true,"stream":true}' & P1=$!
inflight 2 "" '{"prompt":"Once","max_tokens":300,"ignore_eos":true}' & P2=$!
inflight 3 1 '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":300,"ignore_eos":true,"stream":true,"n":2}' /v1/chat/completions & P3=$!
inflight 4 "" '{"prompt":[100,101,102,103,104,105,106,107,108,109],"max_tokens":300,"ignore_eos":true,"n":3}' & P4=$!
for _ in $(seq 200); do [ "$(mval kvant_num_requests_running)" -ge 4 ] && break; sleep 0.02; done
RUN_AT_TERM=$(mval kvant_num_requests_running)
kill -0 "$SERVER_PID" 2>/dev/null || fail "kvant serve was not running at the end of the load"
grep -E -i 'sanitizer|assert|panic|segmentation|engine step failed' "$W/server.log" && fail "the server log shows an error"
kill -TERM "$SERVER_PID"
sleep 0.2
AFTER=$(curl -s -o /dev/null -w '%{http_code}' -m 5 -H "$J" "$B/v1/completions" -d '{"prompt":"late","max_tokens":4}'); ARC=$?
STATUS=0
wait "$SERVER_PID" || STATUS=$?
SERVER_PID=""
wait $P1 $P2 $P3 $P4
echo "SIGTERM with $RUN_AT_TERM sequences running: exit status $STATUS; a request sent after it: curl rc $ARC, HTTP $AFTER"
[ "$STATUS" = 0 ] || fail "exit status $STATUS after SIGTERM"
for i in 1 2 3 4; do
  read -r rc code <"$W/inflight.$i.st"
  f=$W/inflight.$i
  reasons=$(grep -o '"finish_reason":"[a-z_]*"' "$f" | sort | uniq -c | tr -s ' \n' ' ')
  echo "  in flight $i: curl rc $rc, HTTP $code, $reasons$(grep -q '^data: \[DONE\]' "$f" && echo ', [DONE]')"
  [ "$rc" = 0 ] && [ "$code" = 200 ] || fail "in-flight request $i: curl rc $rc, HTTP $code"
  grep -q '"finish_reason":"\(length\|stop\|abort\)"' "$f" || fail "in-flight request $i ended without a finish_reason"
  case $i in 1|3) grep -q '^data: \[DONE\]' "$f" || fail "in-flight stream $i ended without [DONE]" ;; esac
done
[ "$ARC" = 7 ] || [ "$AFTER" = 503 ] || fail "a request after SIGTERM got curl rc $ARC HTTP $AFTER (expected refused or 503)"

echo
echo "soak: ${T_LOAD} s of load, ${T[sent]} requests (+2 alone), server kept up, exit $STATUS"
if [ $FAIL = 0 ]; then echo "soak: PASS"; else echo "soak: FAIL (work dir kept: $W)"; KEEP=1; fi
exit $FAIL
