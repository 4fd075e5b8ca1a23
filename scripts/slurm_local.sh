#!/usr/bin/env bash
# The tiny grid end to end through Snakemake's SLURM executor, on a one-node SLURM started here.
#
#   scripts/slurm_local.sh [profile (tiny)]
#
# Installs slurm-wlm and munge from Debian's packages when missing (apt-get, as root), writes a
# slurm.conf for this machine alone (one node, localhost, its CPUs), starts munged, slurmctld and
# slurmd, runs `frag reproduce --profile <profile> -- --profile profiles/slurm` into a temporary
# records folder and cache (nothing in the repository changes), then stops the daemons it started.
# Needs the checkout's .venv (make setup). Exits with the workflow's status.
set -euo pipefail
profile=${1:-tiny}
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
work=$(mktemp -d /tmp/frag_slurm.XXXXXX)
cd "$repo"

if ! command -v slurmctld > /dev/null || ! command -v munged > /dev/null; then
  echo "== installing slurm-wlm and munge"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge > "$work/apt.log"
fi

echo "== a one-node SLURM in $work"
cpus=$(nproc)
mem=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024))
mkdir -p "$work"/{spool,state,log,munge} /etc/slurm /run/munge
conf=/etc/slurm/slurm.conf
if [ -e "$conf" ] && ! grep -q "written by frag scripts/slurm_local.sh" "$conf"; then
  echo "$conf exists and is not this script's: not overwritten; stop" >&2
  exit 2
fi
cat > "$conf" << CONF
# written by frag scripts/slurm_local.sh: one node, this machine
ClusterName=frag-local
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MinJobAge=600
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF

started=()
stop() {
  for pid in "${started[@]}"; do kill "$pid" 2> /dev/null || true; done
  echo "== SLURM stopped (logs in $work/log)"
}
trap stop EXIT
if [ ! -s /etc/munge/munge.key ]; then
  mkdir -p /etc/munge
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2> /dev/null
  chmod 400 /etc/munge/munge.key
fi
chown -R root /etc/munge /run/munge
if ! munge -n > /dev/null 2>&1; then
  munged --force --socket=/run/munge/munge.socket.2 --pid-file="$work/munged.pid" --log-file="$work/log/munged.log"
  started+=("$(cat "$work/munged.pid")")
fi
slurmctld -f "$conf"
sleep 2
started+=("$(cat "$work/slurmctld.pid")")
slurmd -f "$conf"
sleep 2
started+=("$(cat "$work/slurmd.pid")")
for _ in $(seq 30); do sinfo -h -o %t | grep -qE "^idle" && break; sleep 1; done
sinfo

echo "== the $profile grid through the SLURM executor ($(date -u +%T))"
export FRAG_CACHE_DIR="$work/cache" FRAG_RUNS_DIR="$work/papermill_runs" FRAG_FIGURES_DIR="$work/figures"
export FRAG_THREADS=1
status=0
.venv/bin/python -m frag_utils reproduce --profile "$profile" -- --profile profiles/slurm \
  --slurm-no-account --slurm-status-command squeue --slurm-logdir "$work/slurm-logs" \
  --default-resources mem_mb=1500 runtime=60 --latency-wait 10 || status=$?
echo "== ended $(date -u +%T) with status $status; the SLURM jobs (sacct, else squeue):"
sacct 2> /dev/null | head -40 || squeue --states=all 2> /dev/null | head -40 || true
echo "records: $(find "$FRAG_RUNS_DIR" -name results.json | wc -l) results.json in $FRAG_RUNS_DIR"
exit $status
