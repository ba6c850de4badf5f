#!/usr/bin/env bash
# bench/serve_errors.sh - the error-handling matrix of kvant serve, tried as a
# new user would with curl: starts `kvant serve --api-key sk-test` on a free
# loopback port, sends each bad request once, and prints a markdown table
# (request, HTTP status, start of the body), then the /metrics lines (no
# histogram buckets) and the server's exit status after SIGTERM.  What it
# prints is for reading; tests/test_server.c and tests/node/test_openai.mjs
# hold these cases as tests.
#
#   bench/serve_errors.sh [MODEL]   (default ../shared/models/stories260K.gguf)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/serve_lib.sh
MODEL=${1:-../shared/models/stories260K.gguf}
port=$(free_port)
start_kvant "$port" "${TMPDIR:-/tmp}/serve_errors.log" -m "$MODEL" --api-key sk-test
U=http://127.0.0.1:$port/v1/completions
KEY='Authorization: Bearer sk-test'
JSON='Content-Type: application/json'

row() { # LABEL CURL-ARGS...: one table row
  local label=$1; shift
  local out code body
  out=$(curl -s -w '\n%{http_code}' "$@") || true
  code=$(tail -n 1 <<<"$out")
  body=$(head -n -1 <<<"$out" | head -c 240)
  printf '| %s | %s | `%s` |\n' "$label" "$code" "$body"
}

big=$(mktemp)
head -c 3000000 /dev/zero | tr '\0' 'a' >"$big"
echo "| request | status | body (start) |"
echo "|---|--:|---|"
row "no API key" -X POST "$U" -H "$JSON" -d '{"prompt":"Once","max_tokens":4}'
row "wrong API key" -X POST "$U" -H 'Authorization: Bearer nope' -H "$JSON" -d '{"prompt":"Once","max_tokens":4}'
row 'body `{"prompt":`' -X POST "$U" -H "$KEY" -H "$JSON" -d '{"prompt":'
row '`"max_tokens":"x"`' -X POST "$U" -H "$KEY" -H "$JSON" -d '{"prompt":"Once","max_tokens":"x"}'
row '`"model":"gpt-9"`' -X POST "$U" -H "$KEY" -H "$JSON" -d '{"model":"gpt-9","prompt":"Once","max_tokens":4}'
row '`"prompt":""`' -X POST "$U" -H "$KEY" -H "$JSON" -d '{"prompt":"","max_tokens":4}'
row '`"max_tokens":100000`' -X POST "$U" -H "$KEY" -H "$JSON" -d '{"prompt":"Once","max_tokens":100000}'
row "3 MB body" -X POST "$U" -H "$KEY" -H "$JSON" --data-binary @"$big"
row "GET /v1/nothing" -H "$KEY" "http://127.0.0.1:$port/v1/nothing"
row "temperature 1, seed 3" -X POST "$U" -H "$KEY" -H "$JSON" \
    -d '{"prompt":"Once upon a time","max_tokens":8,"temperature":1,"seed":3}'
rm -f "$big"
echo
echo "/metrics (histogram buckets left out):"
curl -s -H "$KEY" "http://127.0.0.1:$port/metrics" | grep '^kvant_' | grep -v '_bucket' || true
kill -TERM "$SERVER_PID"
status=0
wait "$SERVER_PID" || status=$?
SERVER_PID=""
echo "kvant serve exit status after SIGTERM: $status"
