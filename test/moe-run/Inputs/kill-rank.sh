#!/usr/bin/env bash
# Usage: kill-rank.sh RANK METRICS LIMIT LAUNCHER [ARGS...]
#
# Starts a training job (LAUNCHER is mpirun, possibly behind env, or
# sbatch), waits until its first step (or MOE_KILL_AFTER_STEPS steps) is in
# METRICS, sends SIGKILL (or MOE_KILL_SIGNAL, e.g. STOP for a rank that
# hangs) to the process of rank RANK of that job, and succeeds only if the
# whole job then ends, failing, within LIMIT seconds. Prints how long that
# took.
rank=$1 metrics=$2 limit=$3
shift 3
launcher_command=$1
"$@" &
launcher=$!
after=${MOE_KILL_AFTER_STEPS:-1}
for _ in $(seq 1200); do
  [ -f "$metrics" ] && [ "$(wc -l < "$metrics")" -ge "$after" ] && break
  kill -0 "$launcher" 2>/dev/null || { echo "kill-rank: the job ended before its first step"; exit 1; }
  sleep 0.1
done
# The victim is found among this job's own processes only, never by name
# across the machine (parallel tests and other jobs run moe-run too):
#  * under mpirun, the launcher's descendant whose environment carries the
#    rank (OMPI_COMM_WORLD_RANK);
#  * under sbatch, the task of that rank in this test's own Slurm cluster,
#    as `scontrol listpids` lists it (the tasks descend from slurmd, not
#    from sbatch).
descendants() {
  local child
  for child in $(pgrep -P "$1"); do
    echo "$child"
    descendants "$child"
  done
}
find_victim() {
  if [ "$(basename "$launcher_command")" = sbatch ]; then
    scontrol listpids 2>/dev/null |
      awk -v rank="$rank" '$3 ~ /^[0-9]+$/ && $5 == rank { print $1; exit }'
    return
  fi
  local pid
  for pid in $(descendants "$launcher"); do
    if tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null |
         grep -qx "OMPI_COMM_WORLD_RANK=$rank"; then
      echo "$pid"
      return
    fi
  done
}
victim=$(find_victim)
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
