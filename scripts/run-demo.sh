#!/usr/bin/env bash
# `make run`: start the embedded gateway with the local model, bring a being to life for a
# few cycles (resuming it on later runs), show what it did, and stop the gateway.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
STATE_DIR=${STATE_DIR:-demo/being}
WORKSPACE=${WORKSPACE:-demo/workspace}
CYCLES=${CYCLES:-3}
PORT=$($BIN/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$WORKSPACE" "$(dirname "$STATE_DIR")"

$BIN/singularity brama serve --host 127.0.0.1 --port "$PORT" 2>demo/gateway.log &
GATEWAY=$!
trap 'kill $GATEWAY 2>/dev/null || true; wait $GATEWAY 2>/dev/null || true' EXIT
# The gateway listens while it loads the model: it is ready once /health answers. Give up
# (with its log) if it exits, or after READY_SECS: never start the being on a dead gateway.
READY_SECS=${READY_SECS:-900}
DEADLINE=$((SECONDS + READY_SECS))
until $BIN/python -c "import httpx, sys; sys.exit(httpx.get('http://127.0.0.1:$PORT/health', timeout=30).status_code != 200)" 2>/dev/null; do
  kill -0 $GATEWAY 2>/dev/null || { cat demo/gateway.log; exit 1; }
  if (( SECONDS >= DEADLINE )); then
    echo "the gateway did not answer within $READY_SECS s:" >&2
    cat demo/gateway.log >&2
    exit 1
  fi
  sleep 0.5
done

# A new being is told once what its operator would like; a resumed one just goes on living.
FIRST=(--stimulus "Your operator says: welcome, Ada. Keep a short notes.md in your workspace \
about what you do and learn, remember what matters, and give yourself a rule or two.")
[[ -f "$STATE_DIR/state.json" ]] && FIRST=(--resume)
$BIN/singularity run "${FIRST[@]}" \
  --brama-url "http://127.0.0.1:$PORT" --state-dir "$STATE_DIR" --workspace "$WORKSPACE" \
  --agent-name Ada --specialty "keeping useful notes" \
  --max-cycles "$CYCLES" --cycle-interval-secs 0 --max-tool-rounds 3 --max-tokens 256 \
  --http-timeout-secs 900 \
  --input-price 0.5 --output-price 1.5
echo
$BIN/singularity show --state-dir "$STATE_DIR"
$BIN/singularity verify "$STATE_DIR"
