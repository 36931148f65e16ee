# shellcheck shell=bash
# A one-node Slurm cluster on this machine for tests: munged, slurmctld and slurmd with their own
# config, sockets, state and ports under a temporary directory, stopped by PID.
#   source slurm_cluster.sh; slurm_start DIR; ...; slurm_stop
# Needs root (SlurmUser=root, munged run as the munge user); docs/slurm.md ("Tested").

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

slurm_start() {
  SLURM_DIR=$1
  local host
  host=$(hostname)
  # Slurm (SlurmctldHost, NodeName) and eft-cluster.sbatch (the controller's address) name nodes by
  # host name; where it does not resolve, sinfo and slurmd retry for minutes instead of failing.
  if ! getent hosts "$host" >/dev/null; then
    echo "slurm_cluster: this machine's host name '$host' does not resolve (getent hosts): add it to /etc/hosts" >&2
    return 1
  fi
  mkdir -p "$SLURM_DIR"/{munge,ctld,spool,log}
  chown munge:munge "$SLURM_DIR/munge"
  chmod 711 "$SLURM_DIR/munge"
  runuser -u munge -- mungekey --create --keyfile "$SLURM_DIR/munge/munge.key" --force >/dev/null
  runuser -u munge -- munged --socket "$SLURM_DIR/munge/munge.socket" --key-file "$SLURM_DIR/munge/munge.key" \
    --pid-file "$SLURM_DIR/munge/munged.pid" --log-file "$SLURM_DIR/munge/munged.log" \
    --seed-file "$SLURM_DIR/munge/munged.seed" --force
  for _ in $(seq 50); do [[ -S $SLURM_DIR/munge/munge.socket ]] && break; sleep 0.1; done
  MUNGED_PID=$(cat "$SLURM_DIR/munge/munged.pid")
  local cpus
  cpus=$(nproc)
  # cred_expire: a requeued job waits this long before it may start again (the node keeps the old
  # run's credential revoked as long); 120 s by default, 15 s keeps the requeue test short.
  # sched_interval: how often pending jobs whose BeginTime has passed are looked at (60 s by default).
  cat >"$SLURM_DIR/slurm.conf" <<CONF
ClusterName=eft-test
SlurmctldHost=$host
SlurmUser=root
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
AuthInfo=socket=$SLURM_DIR/munge/munge.socket,cred_expire=15
CredType=cred/munge
StateSaveLocation=$SLURM_DIR/ctld
SlurmdSpoolDir=$SLURM_DIR/spool
SlurmctldPidFile=$SLURM_DIR/slurmctld.pid
SlurmdPidFile=$SLURM_DIR/slurmd.pid
SlurmctldLogFile=$SLURM_DIR/log/slurmctld.log
SlurmdLogFile=$SLURM_DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
KillWait=10
MinJobAge=600
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  export SLURM_CONF=$SLURM_DIR/slurm.conf
  slurmctld -D -i -f "$SLURM_CONF" >"$SLURM_DIR/log/slurmctld.out" 2>&1 &
  SLURMCTLD_PID=$!
  slurmd -D -f "$SLURM_CONF" >"$SLURM_DIR/log/slurmd.out" 2>&1 &
  SLURMD_PID=$!
  local deadline=$((SECONDS + 30))
  while ((SECONDS < deadline)); do
    if timeout 5 sinfo -h -o '%t' 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then return 0; fi
    sleep 0.2
  done
  echo "Slurm did not come up:" >&2
  tail -20 "$SLURM_DIR/log/slurmctld.log" "$SLURM_DIR/log/slurmd.log" "$SLURM_DIR/log/"*.out >&2 || true
  return 1
}

slurm_stop() {
  for pid in ${SLURMD_PID:-} ${SLURMCTLD_PID:-} ${MUNGED_PID:-}; do kill -TERM "$pid" 2>/dev/null || true; done
  sleep 1
  for pid in ${SLURMD_PID:-} ${SLURMCTLD_PID:-} ${MUNGED_PID:-}; do kill -KILL "$pid" 2>/dev/null || true; done
}

# The state of Slurm job $1 (COMPLETED, FAILED, CANCELLED, RUNNING, PENDING...).
slurm_job_state() { scontrol show job "$1" -o 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
