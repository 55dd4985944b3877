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
for _ in $(seq 1 120); do
  if $BIN/python -c "import httpx, sys; sys.exit(httpx.get('http://127.0.0.1:$PORT/health').status_code != 200)" 2>/dev/null; then
    break
  fi
  kill -0 $GATEWAY 2>/dev/null || { cat demo/gateway.log; exit 1; }
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
