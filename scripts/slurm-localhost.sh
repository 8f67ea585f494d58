#!/usr/bin/env bash
# A real Slurm cluster on this one machine, for the tests (issue 7): munge,
# slurmctld and slurmd under a scratch directory, as root, without systemd.
#   scripts/slurm-localhost.sh start DIR   # prints `export SLURM_CONF=...`
#   scripts/slurm-localhost.sh stop DIR
#   scripts/slurm-localhost.sh run DIR COMMAND...  # start, run, always stop
# Start waits (bounded) until the node is idle; stop ends the daemons by the
# PIDs in their pidfiles. Facts behind it: ../shared/notes/slurm-localhost.md.
set -euo pipefail
action=${1:?usage: slurm-localhost.sh start|stop|run DIR [COMMAND...]}
base=$(realpath -m "${2:?usage: slurm-localhost.sh start|stop|run DIR [COMMAND...]}")
conf=$base/slurm.conf

stop_daemon() { # pidfile
  [ -f "$1" ] || return 0
  local pid; pid=$(cat "$1")
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}

if [ "$action" = run ]; then
  shift 2
  "$0" stop "$base"
  trap '"$0" stop "$base"' EXIT
  started=$("$0" start "$base") || exit 1
  eval "$started"
  "$@"
  exit $?
fi

if [ "$action" = stop ]; then
  SLURM_CONF=$conf scancel --user=root 2>/dev/null || true
  stop_daemon "$base/run/slurmd.pid"
  stop_daemon "$base/run/slurmctld.pid"
  stop_daemon "$base/munge/munged.pid"
  exit 0
fi
[ "$action" = start ] || { echo "slurm-localhost.sh: unknown action '$action'" >&2; exit 2; }

for tool in munged slurmctld slurmd sinfo; do
  command -v "$tool" > /dev/null ||
    { echo "slurm-localhost.sh: $tool not found (apt-get install slurm-wlm munge)" >&2; exit 1; }
done
mkdir -p "$base"/{munge,state,spool,run,log}
chmod 700 "$base/munge"
if [ ! -f "$base/munge/munge.key" ]; then
  dd if=/dev/urandom bs=1 count=1024 of="$base/munge/munge.key" status=none
  chmod 400 "$base/munge/munge.key"
fi
munged --force --key-file="$base/munge/munge.key" \
  --socket="$base/munge/munge.socket.2" --pid-file="$base/munge/munged.pid" \
  --log-file="$base/munge/munged.log" --seed-file="$base/munge/munge.seed"

# Free ports, so that two clusters (two test runs) on one machine do not
# collide.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
ctld_port=${MOE_SLURMCTLD_PORT:-$(free_port)}
slurmd_port=${MOE_SLURMD_PORT:-$(free_port)}
while [ "$slurmd_port" = "$ctld_port" ]; do slurmd_port=$(free_port); done
# Jobs of more ranks than cores (the tests' 4 ranks on 2 cores) need the
# node to declare them; config_overrides makes slurmd trust the count.
cpus=$(( $(nproc) > 8 ? $(nproc) : 8 ))
cat > "$conf" <<CONF
ClusterName=moe
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$base/munge/munge.socket.2
StateSaveLocation=$base/state
SlurmdSpoolDir=$base/spool/%n
SlurmctldPidFile=$base/run/slurmctld.pid
SlurmdPidFile=$base/run/slurmd.pid
SlurmctldLogFile=$base/log/slurmctld.log
SlurmdLogFile=$base/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
MailProg=/bin/true
InactiveLimit=0
KillWait=5
MinJobAge=60
SlurmdParameters=config_overrides
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
: > "$base/plugstack.conf"
export SLURM_CONF=$conf
slurmctld -c -f "$conf"
slurmd -N localhost -f "$conf"
for _ in $(seq 100); do
  [ "$(sinfo -h -o %t 2>/dev/null)" = idle ] && { echo "export SLURM_CONF=$conf"; exit 0; }
  sleep 0.2
done
echo "slurm-localhost.sh: the node did not become idle; see $base/log" >&2
exit 1
