# bench/serve_lib.sh - helpers the serve_* benchmarks source: start kvant serve
# or llama.cpp's llama-server on a free loopback port, wait for /health, stop.
KVANT=${KVANT:-build/kvant}
LLAMA_DIR=${LLAMA_DIR:-/opt/llama.cpp/build/bin}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_health() { # PORT PID
  for _ in $(seq 1200); do
    curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

SERVER_PID=""
start_kvant() { # PORT LOG ARGS...
  local port=$1 log=$2; shift 2
  "$KVANT" serve --port "$port" -q "$@" >"$log" 2>&1 &
  SERVER_PID=$!
  wait_health "$port" "$SERVER_PID" || { echo "kvant serve did not start:"; cat "$log"; exit 1; }
}
start_llama() { # PORT LOG ARGS...
  local port=$1 log=$2; shift 2
  LD_LIBRARY_PATH="$LLAMA_DIR" "$LLAMA_DIR/llama-server" --host 127.0.0.1 --port "$port" "$@" >"$log" 2>&1 &
  SERVER_PID=$!
  wait_health "$port" "$SERVER_PID" || { echo "llama-server did not start:"; tail -20 "$log"; exit 1; }
}
stop_server() {
  [ -n "$SERVER_PID" ] || return 0
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}
trap stop_server EXIT
