#!/usr/bin/env bash
# Usage: fails-within.sh SECONDS mpirun [ARGS...]
#
# Runs an MPI job that is expected to fail, and succeeds only if every rank
# ended within SECONDS with the job failing. `not timeout ...` cannot tell a
# failure from a hang (timeout's 124 counts as a failure too).
#
# Open MPI 4.1.4 with PMIx 4.2.2 (Debian bookworm) has a bug in mpirun
# itself: after a job ends abnormally (MPI_Abort, or a rank exiting without
# MPI_Finalize) mpirun sometimes crashes (SIGSEGV) or deadlocks in
# PMIx_server_finalize, after all ranks have exited. Neither says anything
# about the ranks, so: a crash counts as the job failing, and a deadlocked
# mpirun whose ranks are all gone is killed after a grace period.
limit=$1
shift
"$@" &
launcher=$!
start=$SECONDS
ranksSeen=""
ranksGone=""
# True while the launcher has a live (not zombie) child: a rank still runs.
ranksRunning() {
  ps --ppid "$launcher" -o stat= 2>/dev/null | grep -qv '^Z'
}
while kill -0 "$launcher" 2>/dev/null; do
  if [ $((SECONDS - start)) -ge "$limit" ]; then
    echo "fails-within: the job did not end within $limit s"
    kill -9 "$launcher" 2>/dev/null
    exit 1
  fi
  if ranksRunning; then
    ranksSeen=1
    ranksGone=""
  elif [ -n "$ranksSeen" ]; then
    ranksGone=${ranksGone:-$SECONDS}
    if [ $((SECONDS - ranksGone)) -ge 5 ]; then
      echo "fails-within: every rank ended but mpirun hung in its shutdown (Open MPI bug); killed it"
      kill -9 "$launcher" 2>/dev/null
      wait "$launcher" 2>/dev/null
      echo "fails-within: the job failed and ended"
      exit 0
    fi
  fi
  sleep 0.05
done
wait "$launcher"
status=$?
echo "fails-within: exit status $status"
if [ "$status" -eq 0 ]; then
  echo "fails-within: the job succeeded but was expected to fail"
  exit 1
fi
echo "fails-within: the job failed and ended"
