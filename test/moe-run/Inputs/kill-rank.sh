#!/usr/bin/env bash
# Usage: kill-rank.sh RANK METRICS LIMIT LAUNCHER [ARGS...]
#
# Starts a training job, waits until its first step (or MOE_KILL_AFTER_STEPS
# steps) is in METRICS, sends SIGKILL (or MOE_KILL_SIGNAL, e.g. STOP for a
# rank that hangs) to the
# process of rank RANK with SIGKILL (found by OMPI_COMM_WORLD_RANK or
# SLURM_PROCID in its environment), and succeeds only if the whole job then
# ends, failing, within LIMIT seconds. Prints how long that took.
rank=$1 metrics=$2 limit=$3
shift 3
"$@" &
launcher=$!
after=${MOE_KILL_AFTER_STEPS:-1}
for _ in $(seq 1200); do
  [ -f "$metrics" ] && [ "$(wc -l < "$metrics")" -ge "$after" ] && break
  kill -0 "$launcher" 2>/dev/null || { echo "kill-rank: the job ended before its first step"; exit 1; }
  sleep 0.1
done
victim=""
for pid in $(pgrep -f moe-run); do
  env=$(tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null)
  if printf '%s\n' "$env" | grep -qx "OMPI_COMM_WORLD_RANK=$rank" ||
     printf '%s\n' "$env" | grep -qx "SLURM_PROCID=$rank"; then
    # Under srun every moe-run has SLURM_PROCID; the rank's own has no
    # moe-run parent.
    victim=$pid
    break
  fi
done
[ -n "$victim" ] || { echo "kill-rank: no process of rank $rank"; kill -9 "$launcher"; exit 1; }
kill -"${MOE_KILL_SIGNAL:-KILL}" "$victim"
killed=$SECONDS
while kill -0 "$launcher" 2>/dev/null; do
  if [ $((SECONDS - killed)) -ge "$limit" ]; then
    echo "kill-rank: the job did not end within $limit s of the kill"
    kill -9 "$launcher"
    exit 1
  fi
  sleep 0.1
done
wait "$launcher"
status=$?
# A stopped rank the launcher did not end: let it go.
kill -9 "$victim" 2>/dev/null
echo "kill-rank: rank $rank killed; the job ended within $((SECONDS - killed + 1)) s (exit status $status)"
[ "$status" -ne 0 ] || { echo "kill-rank: the job succeeded"; exit 1; }
