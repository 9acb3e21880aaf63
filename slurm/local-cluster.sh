#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A throwaway Slurm cluster on this one machine: munged, slurmctld and N
# slurmd's (node1..nodeN, all on 127.0.0.1, each on its own port) with fake
# GPUs. Everything it needs lives under one directory DIR. Used by the tests
# (ctest fixture `slurm_cluster`) and by users who want to try a generated
# job.sbatch without a real cluster. See docs/local-cluster.md.
set -euo pipefail

readonly PROG="${0##*/}"
readonly READY_TIMEOUT_S=30   # bound on every "wait until ..." of start
readonly STOP_TIMEOUT_S=15    # bound on every "wait until ... exits" of stop
readonly JOBS_TIMEOUT_S=30    # bound on waiting for cancelled jobs to leave

usage() {
  cat <<EOF
Usage: $PROG start DIR [--restart] [--port-base N] [--nodes N] [--cpus-per-node N] [--gpus-per-node N]
       $PROG stop DIR
       $PROG status DIR
       $PROG env DIR
       $PROG --help

A local Slurm cluster for trying Maestro's job scripts without a real cluster:
munged, slurmctld and N slurmd's (node1..nodeN, default 4) on 127.0.0.1, each
node with 8 CPUs and 4 fake GPUs (gres gpu backed by symlinks to /dev/null).
Partitions: batch (default) and urgent (preempts batch; the preempted job is
requeued). No accounting daemon. Everything lives under DIR.

  start DIR     create DIR (configs, munge key, spool, logs) and start the
                daemons; waits until every node is idle.
      --restart        stop a cluster already running in DIR first
      --port-base N    slurmctld listens on N, node i on N+i (default: free
                       loopback ports picked automatically)
      --nodes N        number of nodes (default 4; a hetjob needs at least as
                       many nodes as components)
      --cpus-per-node N, --gpus-per-node N   (defaults 8 and 4)
  stop DIR      cancel all jobs, then stop the slurmd's, slurmctld and munged
  status DIR    say whether each daemon runs and show sinfo; exit 0 when up
  env DIR       print the shell exports that point Slurm's commands at DIR:
                  eval "\$($PROG env DIR)"; sbatch job.sbatch; squeue
EOF
}

die() {
  printf '%s: error: %s\n' "$PROG" "$*" >&2
  exit 1
}

say() { printf '%s: %s\n' "$PROG" "$*"; }

# ---- paths under DIR ----------------------------------------------------------
set_paths() {
  CLUSTER_DIR="$1"
  ETC="$CLUSTER_DIR/etc"
  RUN="$CLUSTER_DIR/run"
  LOG="$CLUSTER_DIR/log"
  SPOOL="$CLUSTER_DIR/spool"
  MUNGE_DIR="$CLUSTER_DIR/munge"
  DEV="$CLUSTER_DIR/dev"
  TMP="$CLUSTER_DIR/tmp"
  SLURM_CONF_FILE="$ETC/slurm.conf"
  MUNGE_KEY="$ETC/munge.key"
  MUNGE_SOCKET="$MUNGE_DIR/munge.socket.2"
  CLUSTER_FILE="$ETC/cluster.env"
}

absolute_dir() {
  local dir="$1"
  [[ -n "$dir" ]] || die "missing DIR (see $PROG --help)"
  mkdir -p -- "$dir" 2>/dev/null || die "cannot create directory '$dir'"
  (cd -- "$dir" && pwd -P)
}

# The name of the program a PID runs, or nothing when it does not run (or is
# a zombie: it has exited, only its parent has not reaped it yet). Builtins
# only: this runs for every process on the machine.
proc_name() {
  local pid="$1" key value name="" state=""
  [[ "$pid" =~ ^[0-9]+$ && -r "/proc/$pid/status" ]] || return 0
  {
    while read -r key value _; do
      case "$key" in
        Name:) name="$value" ;;
        State:) state="$value"; break ;;
      esac
    done <"/proc/$pid/status"
  } 2>/dev/null || true
  [[ "$state" == Z ]] && return 0
  printf '%s' "$name"
}

# PID from a pid file when that process is alive and runs PROGRAM.
live_pid() {
  local pid_file="$1" program="$2" pid
  [[ -f "$pid_file" ]] || return 0
  pid=""
  { read -r pid <"$pid_file"; } 2>/dev/null || true
  pid="${pid//[!0-9]/}"
  [[ -n "$pid" ]] || return 0
  if [[ "$(proc_name "$pid")" == "$program"* ]]; then
    printf '%s' "$pid"
  fi
}

# Every daemon of this cluster as "program pid_file" lines, in stop order.
daemon_list() {
  local node
  for node in $(node_names); do
    printf 'slurmd %s\n' "$RUN/slurmd-$node.pid"
  done
  printf 'slurmctld %s\n' "$RUN/slurmctld.pid"
  printf 'munged %s\n' "$RUN/munged.pid"
}

node_names() {
  local n=4 i
  if [[ -f "$CLUSTER_FILE" ]]; then
    n="$(sed -n 's/^NODES=//p' "$CLUSTER_FILE")"
  fi
  for ((i = 1; i <= n; i++)); do printf 'node%d\n' "$i"; done
}

# Processes of this cluster: the daemons (found by the marker variable every
# daemon is started with), their slurmstepd's (which clear their environment;
# their cwd is DIR/log) and the processes of its jobs (SLURM_JOB_ID set and
# SLURM_CONF naming this cluster; proctrack/linuxproc loses a job process
# whose parent died, e.g. an srun whose batch script crashed).
marked_pids() {
  local file pid comm
  {
    grep -lzsxF -e "MAESTRO_LOCAL_CLUSTER=$CLUSTER_DIR" /proc/[0-9]*/environ
    while read -r file; do
      grep -qzs '^SLURM_JOB_ID=' "$file" && printf '%s\n' "$file"
    done < <(grep -lzsxF -e "SLURM_CONF=$SLURM_CONF_FILE" /proc/[0-9]*/environ)
    for file in /proc/[0-9]*/comm; do
      comm=""
      { read -r comm <"$file"; } 2>/dev/null || true
      [[ "$comm" == slurmstepd* ]] || continue
      pid="${file%/comm}"
      [[ "$(readlink "$pid/cwd" 2>/dev/null)" == "$CLUSTER_DIR"/* ]] && printf '%s\n' "$file"
    done
  } | sed -n 's|^/proc/\([0-9]*\)/.*|\1|p' | sort -un | grep -vxF -e "$$" -e "$BASHPID" || true
}

running_daemons() {
  local program pid_file pid
  while read -r program pid_file; do
    pid="$(live_pid "$pid_file" "$program")"
    [[ -n "$pid" ]] && printf '%s(%s) ' "${pid_file##*/}" "$pid"
  done < <(daemon_list)
  return 0
}

remove_stale_pid_files() {
  local program pid_file
  while read -r program pid_file; do
    if [[ -f "$pid_file" && -z "$(live_pid "$pid_file" "$program")" ]]; then
      rm -f -- "$pid_file"
    fi
  done < <(daemon_list)
  return 0
}

log_tail() {
  local file="$1"
  if [[ -s "$file" ]]; then
    printf -- '---- last lines of %s ----\n' "$file" >&2
    tail -n 25 -- "$file" >&2
    printf -- '----\n' >&2
  else
    printf -- '(log %s is empty or missing)\n' "$file" >&2
  fi
}

require_programs() {
  local missing=() p
  for p in munged mungekey slurmctld slurmd sbatch srun squeue scontrol scancel sinfo; do
    command -v "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if ((${#missing[@]})); then
    die "missing program(s): ${missing[*]}. Install them with:
    sudo apt-get install slurmctld slurmd slurm-client munge libpmix-dev
  (or run scripts/setup.sh, which installs everything Maestro needs)."
  fi
  if ! compgen -G '/usr/lib/*/slurm-wlm/mpi_pmix*.so' >/dev/null &&
    ! compgen -G '/usr/lib/slurm/mpi_pmix*.so' >/dev/null; then
    say "warning: Slurm's PMIx plugin (mpi_pmix.so) was not found; srun --mpi=pmix will fail." >&2
  fi
}

# ---- ports ----------------------------------------------------------------------
# TCP ports in LISTEN state on any local address (from /proc, no tools needed).
listening_ports() {
  local f
  for f in /proc/net/tcp /proc/net/tcp6; do
    [[ -r "$f" ]] || continue
    local _sl local_address _rem state _rest
    while read -r _sl local_address _rem state _rest; do
      [[ "$state" == 0A ]] && printf '%d\n' "$((16#${local_address##*:}))"
    done < <(tail -n +2 "$f")
  done | sort -un
}

port_in_use() {
  local port="$1"
  if grep -qx "$port" <<<"$LISTENING"; then return 0; fi
  # A bound but not (yet) listening socket shows up only when we try to connect.
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
  return 1
}

choose_ports() {
  local base="$1" count="$2" i try
  LISTENING="$(listening_ports)"
  if [[ -n "$base" ]]; then
    [[ "$base" =~ ^[0-9]+$ ]] || die "--port-base must be a number, got '$base'"
    ((base >= 1024 && base + count < 65536)) ||
      die "--port-base must be a number from 1024 to $((65535 - count)), got '$base'"
    for ((i = 0; i <= count; i++)); do
      if port_in_use $((base + i)); then
        die "port $((base + i)) on 127.0.0.1 is already in use (the cluster needs ports $base..$((base + count))).
  See what holds it with: ss -ltnp 'sport = :$((base + i))'
  Then pick another --port-base, or leave --port-base out to pick free ports automatically."
      fi
    done
    PORT_BASE="$base"
    return
  fi
  for ((try = 0; try < 200; try++)); do
    base=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
    local ok=1
    for ((i = 0; i <= count; i++)); do
      if port_in_use $((base + i)); then ok=0; break; fi
    done
    if ((ok)); then PORT_BASE="$base"; return; fi
  done
  die "found no $((count + 1)) consecutive free loopback ports; give one with --port-base N"
}

# ---- configuration -------------------------------------------------------------
write_config() {
  local user="$1" nodes="$2" cpus="$3" gpus="$4" host i gres_nodes
  host="$(hostname -s 2>/dev/null || hostname)"
  {
    cat <<EOF
# Generated by slurm/local-cluster.sh: a local test cluster on 127.0.0.1.
# Do not edit; start DIR rewrites it.
ClusterName=maestro-local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$PORT_BASE
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
StateSaveLocation=$SPOOL/slurmctld
SlurmdSpoolDir=$SPOOL/slurmd-%n
TmpFS=$TMP/%n
SlurmdParameters=config_overrides
SlurmctldParameters=preempt_send_user_signal
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=pmix
PropagateResourceLimits=NONE
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
JobRequeue=1
ReturnToService=2
KillWait=5
MinJobAge=600
InactiveLimit=0
SlurmdTimeout=60
SlurmctldTimeout=60
MessageTimeout=10
MailProg=/bin/true
EOF
    for ((i = 1; i <= nodes; i++)); do
      printf 'NodeName=node%d NodeAddr=127.0.0.1 NodeHostname=%s Port=%d CPUs=%d RealMemory=4096 Gres=gpu:%d State=UNKNOWN\n' \
        "$i" "$host" $((PORT_BASE + i)) "$cpus" "$gpus"
    done
    printf 'PartitionName=batch Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1 GraceTime=10\n'
    printf 'PartitionName=urgent Nodes=ALL Default=NO MaxTime=INFINITE State=UP PriorityTier=10 GraceTime=10\n'
  } >"$SLURM_CONF_FILE.tmp"
  mv -f -- "$SLURM_CONF_FILE.tmp" "$SLURM_CONF_FILE"

  # Fake GPUs: a gres needs device files, or the node goes INVAL.
  rm -rf -- "$DEV"
  mkdir -p -- "$DEV"
  for ((i = 0; i < gpus; i++)); do ln -s /dev/null "$DEV/gpu$i"; done
  gres_nodes="node[1-$nodes]"
  ((nodes == 1)) && gres_nodes="node1"
  {
    printf '# Generated by slurm/local-cluster.sh: fake GPUs (symlinks to /dev/null).\n'
    printf 'AutoDetect=off\n'
    if ((gpus > 0)); then
      if ((gpus == 1)); then
        printf 'NodeName=%s Name=gpu File=%s/gpu0\n' "$gres_nodes" "$DEV"
      else
        printf 'NodeName=%s Name=gpu File=%s/gpu[0-%d]\n' "$gres_nodes" "$DEV" $((gpus - 1))
      fi
    fi
  } >"$ETC/gres.conf"

  {
    printf 'NODES=%d\nPORT_BASE=%d\nSLURMCTLD_PORT=%d\n' "$nodes" "$PORT_BASE" "$PORT_BASE"
    for ((i = 1; i <= nodes; i++)); do printf 'NODE%d_PORT=%d\n' "$i" $((PORT_BASE + i)); done
  } >"$CLUSTER_FILE"
}

# ---- start ---------------------------------------------------------------------
# Runs a daemon with the cluster marker in its environment, fully detached
# from our stdin/stdout/stderr (or ctest would wait for it to exit).
launch() {
  local log_file="$1"
  shift
  env "MAESTRO_LOCAL_CLUSTER=$CLUSTER_DIR" "SLURM_CONF=$SLURM_CONF_FILE" "$@" \
    </dev/null >>"$log_file" 2>&1
}

# Waits until a daemon's pid file names a live process; prints the PID.
wait_for_pid_file() {
  local pid_file="$1" program="$2" log_file="$3" deadline pid
  deadline=$((SECONDS + READY_TIMEOUT_S))
  while ((SECONDS < deadline)); do
    pid="$(live_pid "$pid_file" "$program")"
    if [[ -n "$pid" ]]; then
      printf '%s' "$pid"
      return 0
    fi
    sleep 0.1
  done
  return 1
}

start_failed() {
  printf '%s: error: %s\n' "$PROG" "$1" >&2
  shift
  local f
  for f in "$@"; do log_tail "$f"; done
  say "stopping what was started (logs stay in $LOG)" >&2
  stop_cluster >/dev/null 2>&1 || true
  exit 1
}

# If a daemon's log says it could not bind, name the port.
explain_bind_failure() {
  local log_file="$1" port
  if grep -qsiE 'address already in use|unable to bind' "$log_file"; then
    port="$(sed -n 's/.*[Uu]nable to bind listen port (\([0-9]*\)).*/\1/p' "$log_file" | tail -n 1)"
    printf '%s: port %s on 127.0.0.1 is in use by another program (this cluster uses %s..%s).\n  See what holds it with: ss -ltnp; leave --port-base out to pick free ports, or choose another --port-base.\n' \
      "$PROG" "${port:-?}" "$PORT_BASE" $((PORT_BASE + NODES)) >&2
  fi
}

cmd_start() {
  local dir="" restart=0 port_base="" nodes=4 cpus=8 gpus=4
  while (($#)); do
    case "$1" in
      --restart) restart=1 ;;
      --port-base) port_base="${2-}"; shift ;;
      --port-base=*) port_base="${1#*=}" ;;
      --nodes) nodes="${2-}"; shift ;;
      --nodes=*) nodes="${1#*=}" ;;
      --cpus-per-node) cpus="${2-}"; shift ;;
      --cpus-per-node=*) cpus="${1#*=}" ;;
      --gpus-per-node) gpus="${2-}"; shift ;;
      --gpus-per-node=*) gpus="${1#*=}" ;;
      -h | --help) usage; exit 0 ;;
      -*) die "unknown option '$1' for start (see $PROG --help)" ;;
      *) [[ -z "$dir" ]] || die "start takes one DIR, got '$dir' and '$1'"; dir="$1" ;;
    esac
    shift
  done
  [[ "$nodes" =~ ^[1-9][0-9]*$ && "$nodes" -le 64 ]] || die "--nodes must be 1..64, got '$nodes'"
  [[ "$cpus" =~ ^[1-9][0-9]*$ ]] || die "--cpus-per-node must be a positive number, got '$cpus'"
  [[ "$gpus" =~ ^[0-9]+$ && "$gpus" -le 64 ]] || die "--gpus-per-node must be 0..64, got '$gpus'"
  [[ -n "$dir" ]] || die "start needs a DIR (see $PROG --help)"
  require_programs
  set_paths "$(absolute_dir "$dir")"

  local running
  running="$(running_daemons)"
  if [[ -n "$running" ]]; then
    if ((restart)); then
      say "restarting the cluster already running in $CLUSTER_DIR"
      stop_cluster
    else
      die "a cluster is already running in $CLUSTER_DIR ($running); use '$PROG stop $CLUSTER_DIR' first, or 'start --restart'"
    fi
  fi
  # Processes of an earlier cluster here whose pid files are gone.
  local leftovers
  leftovers="$(marked_pids | tr '\n' ' ')"
  if [[ -n "${leftovers// /}" ]]; then
    if ((restart)); then
      stop_cluster
    else
      die "processes of an earlier cluster in $CLUSTER_DIR are still running (PIDs $leftovers); use '$PROG stop $CLUSTER_DIR' first, or 'start --restart'"
    fi
  fi
  remove_stale_pid_files

  NODES="$nodes"
  choose_ports "$port_base" "$nodes"

  local user
  user="$(id -un)"
  # Fresh state every start: a new cluster has no jobs from an earlier one.
  # The logs of the run before stay in log.previous (a failed test's cluster).
  rm -rf -- "$SPOOL" "$TMP" "$RUN" "$CLUSTER_DIR/log.previous"
  if [[ -d "$LOG" ]]; then mv -- "$LOG" "$CLUSTER_DIR/log.previous"; fi
  mkdir -p -- "$ETC" "$RUN" "$LOG" "$SPOOL/slurmctld" "$TMP"
  local i
  for ((i = 1; i <= nodes; i++)); do
    mkdir -p -- "$SPOOL/slurmd-node$i" "$TMP/node$i"
  done
  chmod 1777 "$TMP"
  # munged refuses a socket dir others can write to; clients need to reach it.
  mkdir -p -- "$MUNGE_DIR"
  chmod 0755 "$MUNGE_DIR"
  rm -f -- "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
  chmod 0755 "$CLUSTER_DIR" "$ETC"
  if [[ ! -s "$MUNGE_KEY" ]]; then
    mungekey --create --keyfile="$MUNGE_KEY" --force >/dev/null 2>&1 ||
      dd if=/dev/urandom of="$MUNGE_KEY" bs=1024 count=1 status=none
  fi
  chmod 0600 "$MUNGE_KEY"
  rm -f -- "$ETC/cgroup.conf"  # none: proctrack/linuxproc and task/none need no cgroups
  write_config "$user" "$nodes" "$cpus" "$gpus"

  local t0=$SECONDS
  # munged: own key, own socket, own pid and log files.
  launch "$LOG/munged.log" munged --socket="$MUNGE_SOCKET" --key-file="$MUNGE_KEY" \
    --pid-file="$RUN/munged.pid" --log-file="$LOG/munged.log" --seed-file="$MUNGE_DIR/munged.seed" ||
    start_failed "munged did not start" "$LOG/munged.log"
  wait_for_pid_file "$RUN/munged.pid" munged "$LOG/munged.log" >/dev/null ||
    start_failed "munged did not write $RUN/munged.pid" "$LOG/munged.log"
  if ! munge -n -S "$MUNGE_SOCKET" 2>/dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1; then
    start_failed "munged runs but does not answer on $MUNGE_SOCKET" "$LOG/munged.log"
  fi

  # slurmctld: -c starts with no state (jobs) from an earlier run.
  launch "$LOG/slurmctld.log" slurmctld -c -f "$SLURM_CONF_FILE" ||
    { explain_bind_failure "$LOG/slurmctld.log"; start_failed "slurmctld did not start" "$LOG/slurmctld.log"; }
  wait_for_pid_file "$RUN/slurmctld.pid" slurmctld "$LOG/slurmctld.log" >/dev/null ||
    { explain_bind_failure "$LOG/slurmctld.log"; start_failed "slurmctld did not come up" "$LOG/slurmctld.log"; }

  for ((i = 1; i <= nodes; i++)); do
    launch "$LOG/slurmd-node$i.log" slurmd -f "$SLURM_CONF_FILE" -N "node$i" ||
      { explain_bind_failure "$LOG/slurmd-node$i.log"; start_failed "slurmd for node$i did not start" "$LOG/slurmd-node$i.log" "$LOG/slurmctld.log"; }
  done
  for ((i = 1; i <= nodes; i++)); do
    wait_for_pid_file "$RUN/slurmd-node$i.pid" slurmd "$LOG/slurmd-node$i.log" >/dev/null ||
      { explain_bind_failure "$LOG/slurmd-node$i.log"; start_failed "slurmd for node$i did not come up" "$LOG/slurmd-node$i.log"; }
  done

  # Every node idle (registered, gres valid) within the bound.
  local deadline=$((SECONDS + READY_TIMEOUT_S)) states="" idle
  while ((SECONDS < deadline)); do
    states="$(SLURM_CONF="$SLURM_CONF_FILE" sinfo -h -N -p batch -o '%N %T' 2>/dev/null || true)"
    idle="$(grep -c ' idle$' <<<"$states" || true)"
    ((idle == nodes)) && break
    # A daemon that died will not come back by waiting.
    local dead
    dead="$(dead_daemons)"
    if [[ -n "$dead" ]]; then
      explain_bind_failure "$LOG/slurmctld.log"
      start_failed "daemon(s) exited during start: $dead" "$LOG/slurmctld.log" "$LOG"/slurmd-*.log
    fi
    sleep 0.2
  done
  if ((idle != nodes)); then
    printf '%s: node states:\n%s\n' "$PROG" "${states:-(sinfo gave no answer)}" >&2
    start_failed "not all $nodes nodes became idle within ${READY_TIMEOUT_S}s" "$LOG/slurmctld.log" "$LOG"/slurmd-*.log
  fi

  say "cluster up in $((SECONDS - t0))s: $nodes nodes x $cpus CPUs x $gpus fake GPUs, slurmctld on 127.0.0.1:$PORT_BASE, nodes on ports $((PORT_BASE + 1))..$((PORT_BASE + nodes))"
  cat <<EOF
Use it from a shell with:
  eval "\$($0 env $CLUSTER_DIR)"
  sbatch job.sbatch; squeue; scontrol show job <id>
Partitions: batch (default), urgent (preempts batch, which is requeued).
Logs: $LOG    Stop it with: $0 stop $CLUSTER_DIR
EOF
}

dead_daemons() {
  local program pid_file out=""
  while read -r program pid_file; do
    [[ -f "$pid_file" ]] || continue
    [[ -n "$(live_pid "$pid_file" "$program")" ]] || out+="${pid_file##*/} "
  done < <(daemon_list)
  printf '%s' "$out"
}

# ---- stop ----------------------------------------------------------------------
# Sends TERM to a PID, waits (bounded) for it to exit, then KILLs it.
stop_pid() {
  local pid="$1" program="$2" deadline
  [[ -n "$(proc_name "$pid")" ]] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + STOP_TIMEOUT_S))
  while ((SECONDS < deadline)); do
    [[ -n "$(proc_name "$pid")" ]] || return 0
    sleep 0.1
  done
  say "$program (pid $pid) did not exit within ${STOP_TIMEOUT_S}s; killing it" >&2
  kill -KILL "$pid" 2>/dev/null || true
}

stop_daemons_of() {
  local which="$1" program pid_file pid
  local pids=() pid_files=()
  while read -r program pid_file; do
    [[ "$program" == "$which" ]] || continue
    pid="$(live_pid "$pid_file" "$program")"
    if [[ -n "$pid" ]]; then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
    pid_files+=("$pid_file")
  done < <(daemon_list)
  for pid in ${pids[@]+"${pids[@]}"}; do stop_pid "$pid" "$which"; done
  # The daemons remove their own pid files; these are what a crash left.
  rm -f -- ${pid_files[@]+"${pid_files[@]}"}
}

cancel_jobs() {
  local ctld_pid="$1" deadline left
  [[ -n "$ctld_pid" ]] || return 0
  export SLURM_CONF="$SLURM_CONF_FILE"
  # No job ids: every job of the partition (all users' when run as root).
  # (scancel takes one partition per call.)
  local partition
  while read -r partition; do
    timeout 20 scancel --partition="$partition" >/dev/null 2>&1 || true
  done < <(sed -n 's/^PartitionName=\([^ ]*\).*/\1/p' "$SLURM_CONF_FILE")
  deadline=$((SECONDS + JOBS_TIMEOUT_S))
  while ((SECONDS < deadline)); do
    left="$(timeout 10 squeue -h -o '%i %T' 2>/dev/null || echo 'squeue-failed')"
    [[ -z "$left" ]] && return 0
    [[ "$left" == squeue-failed ]] && break
    sleep 0.2
  done
  say "jobs still there after ${JOBS_TIMEOUT_S}s; stopping anyway: $(tr '\n' ';' <<<"$left")" >&2
}

stop_cluster() {
  local ctld_pid
  ctld_pid="$(live_pid "$RUN/slurmctld.pid" slurmctld)"
  cancel_jobs "$ctld_pid"
  stop_daemons_of slurmd
  stop_daemons_of slurmctld
  stop_daemons_of munged
  # Leftovers (a slurmstepd still retrying, a daemon whose pid file is gone).
  local pid leftovers=()
  while read -r pid; do
    [[ -n "$pid" ]] && leftovers+=("$pid")
  done < <(marked_pids)
  if ((${#leftovers[@]})); then
    kill -TERM "${leftovers[@]}" 2>/dev/null || true
    local deadline=$((SECONDS + 5)) alive
    while ((SECONDS < deadline)); do
      alive=0
      for pid in "${leftovers[@]}"; do [[ -n "$(proc_name "$pid")" ]] && alive=1; done
      ((alive)) || break
      sleep 0.1
    done
    for pid in "${leftovers[@]}"; do
      if [[ -n "$(proc_name "$pid")" ]]; then
        say "killing leftover $(proc_name "$pid") (pid $pid)" >&2
        kill -KILL "$pid" 2>/dev/null || true
      fi
    done
  fi
  rm -f -- "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
}

cmd_stop() {
  [[ $# -eq 1 ]] || die "usage: $PROG stop DIR"
  if [[ ! -d "$1" ]]; then
    say "no such directory '$1': nothing to stop"
    return 0
  fi
  set_paths "$(cd -- "$1" && pwd -P)"
  stop_cluster
  say "stopped (logs stay in $LOG)"
}

# ---- status / env ---------------------------------------------------------------
cmd_status() {
  [[ $# -eq 1 ]] || die "usage: $PROG status DIR"
  [[ -d "$1" ]] || { say "down: no such directory '$1'"; exit 1; }
  set_paths "$(cd -- "$1" && pwd -P)"
  [[ -f "$SLURM_CONF_FILE" ]] || { say "down: no cluster was ever started in $CLUSTER_DIR"; exit 1; }
  local program pid_file pid up=0 down=0
  while read -r program pid_file; do
    pid="$(live_pid "$pid_file" "$program")"
    local name="${pid_file##*/}"
    name="${name%.pid}"
    if [[ -n "$pid" ]]; then
      printf '  %-14s running (pid %s)\n' "$name" "$pid"
      up=$((up + 1))
    else
      printf '  %-14s not running\n' "$name"
      down=$((down + 1))
    fi
  done < <(daemon_list)
  if ((down == 0)); then
    SLURM_CONF="$SLURM_CONF_FILE" timeout 10 sinfo -N -o '%N %P %T %c %G' 2>&1 || true
    say "up: $CLUSTER_DIR (slurmctld on 127.0.0.1:$(sed -n 's/^SLURMCTLD_PORT=//p' "$CLUSTER_FILE"))"
    exit 0
  fi
  if ((up == 0)); then
    say "down: $CLUSTER_DIR"
  else
    say "partly up ($down daemon(s) not running): '$PROG start $CLUSTER_DIR --restart' to restart; logs in $LOG"
  fi
  exit 1
}

cmd_env() {
  [[ $# -eq 1 ]] || die "usage: $PROG env DIR"
  local dir
  dir="$(cd -- "$1" 2>/dev/null && pwd -P)" || die "no such directory '$1'; run '$PROG start $1' first"
  set_paths "$dir"
  [[ -f "$SLURM_CONF_FILE" ]] || die "no cluster in $CLUSTER_DIR; run '$PROG start $CLUSTER_DIR' first"
  printf 'export SLURM_CONF=%q\n' "$SLURM_CONF_FILE"
  printf 'export MAESTRO_SLURM_DIR=%q\n' "$CLUSTER_DIR"
  # Open MPI inside jobs (sbatch passes these on): every "node" is this one
  # machine, so stay on loopback, and keep off shared memory (vader), whose
  # segment names collide between ranks of different "nodes" on one host.
  # Keep in step with LocalSlurmCluster::Environment() (tests/slurm).
  printf 'export OMPI_MCA_btl=self,tcp\n'
  printf 'export OMPI_MCA_btl_tcp_if_include=lo\n'
  printf 'export OMPI_MCA_oob_tcp_if_include=lo\n'
  printf 'export OMPI_MCA_pml=ob1\n'
}

main() {
  local cmd="${1-}"
  [[ $# -gt 0 ]] && shift
  case "$cmd" in
    start) cmd_start "$@" ;;
    stop) cmd_stop "$@" ;;
    status) cmd_status "$@" ;;
    env) cmd_env "$@" ;;
    -h | --help | help) usage ;;
    "") usage >&2; exit 2 ;;
    *) die "unknown command '$cmd' (see $PROG --help)" ;;
  esac
}

main "$@"
