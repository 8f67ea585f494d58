#!/usr/bin/env bash
# Usage: kill-during-checkpoint.sh PARTIAL METRICS STEPS LIMIT COMMAND...
#
# Starts COMMAND (one moe-run process, not a launcher), waits until the
# checkpoint directory PARTIAL (a step-N.partial) holds its shard but no
# manifest yet, and METRICS holds STEPS steps (the steps that ran while the
# write was in flight), then sends SIGKILL to that process: a kill during
# an asynchronous checkpoint. Fails if that state is not reached within
# LIMIT seconds, or if the checkpoint was finished before the kill.
partial=$1 metrics=$2 steps=$3 limit=$4
shift 4
"$@" &
pid=$!
deadline=$((SECONDS + limit))
until [ -f "$partial/rank-00000.safetensors" ] && [ -f "$metrics" ] &&
      [ "$(wc -l < "$metrics")" -ge "$steps" ]; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "kill-during-checkpoint: the run ended before the state to kill in"
    exit 1
  fi
  if [ "$SECONDS" -ge "$deadline" ]; then
    kill -9 "$pid"
    echo "kill-during-checkpoint: no write in flight within $limit s"
    exit 1
  fi
  sleep 0.1
done
if [ -f "$partial/manifest.json" ]; then
  kill -9 "$pid"
  echo "kill-during-checkpoint: $partial was finished before the kill"
  exit 1
fi
kill -9 "$pid"
wait "$pid" 2>/dev/null
echo "kill-during-checkpoint: killed after $(wc -l < "$metrics") steps with $(basename "$partial") in flight"
