#!/usr/bin/env bash
# The main job under real Slurm (docs/slurm.md): starts a one-node cluster on
# this machine (munged, slurmctld and slurmd with their own config, key, spool,
# state and free ports in a temporary directory), then trains Net on
# Fashion-MNIST for one epoch as `srun -n 2 -c 1 cohort train ...` and with
# `sbatch` of the batch script in docs/slurm.md, each task one worker, with
# nothing set by hand: the environment the jobs start from holds only PATH
# (cohort's directory first), HOME, TMPDIR and SLURM_CONF, so the master
# address, port, ranks and threads come from Slurm's variables.
# Stops the daemons and removes the directory at the end, whatever happened.
# Exit codes: 0 passed, 1 failed, 77 skipped (the reason on the last line).
# Usage: slurm_cluster_test.sh COHORT_BIN DOCS_SLURM_MD
set -uo pipefail

cohort=$(realpath "$1")
doc=$2
data=/usr/share/datasets/fashion-mnist
skip() { echo "SKIPPED: $*"; exit 77; }
# A caller inside a Slurm job (or with Slurm's input variables set) must not
# steer the clients below to another cluster or other options.
for v in $(compgen -e); do
  case $v in SLURM* | SBATCH_* | SALLOC_* | SRUN_* | SINFO_* | SQUEUE_* | SCONTROL_*) unset "$v" ;; esac
done

for tool in munged munge unmunge slurmctld slurmd srun sbatch scontrol sinfo squeue scancel python3; do
  command -v "$tool" >/dev/null ||
    skip "$tool not found: install slurmctld slurmd slurm-client munge (scripts/install_deps.sh --tests)"
done
[[ -r $doc ]] || { echo "FAILED: $doc not found"; exit 1; }
[[ -f $data/train-images-idx3-ubyte || -f $data/train-images-idx3-ubyte.gz ]] ||
  { echo "FAILED: no Fashion-MNIST in $data: install dataset-fashion-mnist (scripts/install_deps.sh)"; exit 1; }

tmp=$(mktemp -d /tmp/cohort-slurm.XXXXXX) || { echo "FAILED: mktemp -d under /tmp"; exit 1; }
# munged wants every directory above its socket searchable by all: under
# /tmp, not the caller's TMPDIR, whose parents may not be.
chmod 755 "$tmp"
user=$(id -un)
conf=$tmp/slurm.conf

# Every process that carries our SLURM_CONF is ours: the daemons, their
# slurmstepd and the job's tasks. Ends them by pid (TERM, then KILL).
ours() {
  local p
  for p in /proc/[0-9]*; do
    [[ ${p#/proc/} == "$$" ]] && continue
    { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -qxF "SLURM_CONF=$conf" && echo "${p#/proc/}"
  done
}
stop_pidfile() {  # stop_pidfile FILE: TERM the daemon, wait up to 10 s, then KILL
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null
}
cleanup() {
  if [[ -f $tmp/slurmctld.pid ]]; then
    timeout 10 env SLURM_CONF="$conf" scancel --quiet --user "$user" 2>/dev/null
  fi
  stop_pidfile "$tmp/slurmd.pid"
  stop_pidfile "$tmp/slurmctld.pid"
  stop_pidfile "$tmp/munge/munged.pid"
  unset SLURM_CONF  # so that the sweep's own commands do not carry it
  local left
  left=$(ours)
  if [[ -n $left ]]; then
    echo "cleanup: ending leftover processes $left" >&2
    # shellcheck disable=SC2086  # one pid per word
    kill -KILL $left 2>/dev/null
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

logs() {
  local f
  for f in "$tmp"/munge/munged.log "$tmp"/slurmctld.log "$tmp"/slurmd.log; do
    [[ -f $f ]] && { echo "---- last lines of $f"; tail -n 25 "$f"; }
  done
}
fail() { echo "FAILED: $*"; logs; exit 1; }
# Daemons that do not come up here skip the test, saying what failed and why:
# the last line the daemon wrote to stderr (or to the log given), then the logs.
# skip_daemon REASON [LOG]
skip_daemon() {
  local said
  said=$(grep -v '^\s*$' "${2:-$tmp/daemon.err}" 2>/dev/null | tail -n 1)
  echo "---- why:"
  logs
  skip "$1${said:+: $said}"
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# The first job id: one whose derived store port (10000 + id % 50000) is free
# now (the next job's, one above, most likely too). Job ids of a fresh cluster
# would start at 1: the same ports for every run of this test on the machine.
first_job_id() {
  local p
  for _ in $(seq 50); do
    p=$(free_port)
    ((p >= 10000 && p < 59999)) && { echo $((50000 + p - 10000)); return; }
  done
  echo $((50000 + RANDOM % 40000))
}

# ---- munge: authentication with a key of our own, on a socket of our own.
mkdir -m 700 "$tmp/munge" "$tmp/state" "$tmp/spool"
mkdir -m 755 "$tmp/run"
head -c 1024 /dev/urandom >"$tmp/munge/munge.key"
chmod 600 "$tmp/munge/munge.key"
socket=$tmp/run/munge.socket
timeout 15 munged --key-file="$tmp/munge/munge.key" --socket="$socket" \
  --pid-file="$tmp/munge/munged.pid" --log-file="$tmp/munge/munged.log" \
  --seed-file="$tmp/munge/munged.seed" 2>"$tmp/daemon.err" ||
  skip_daemon "munged did not start (exit $?)"
timeout 10 munge -n -S "$socket" 2>"$tmp/daemon.err" | timeout 10 unmunge -S "$socket" >/dev/null 2>&1 ||
  skip_daemon "munged started but does not encode and decode credentials"

# ---- slurm.conf: one node, "localhost", 2 CPUs; plugins that need no cgroups.
write_conf() {
  cat >"$conf" <<EOF
ClusterName=cohorttest
FirstJobId=$(first_job_id)
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$1
SlurmdPort=$2
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=5
NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=10 State=UP
EOF
}
export SLURM_CONF=$conf

# ---- slurmctld on free ports (retried: a port may be taken between picking and binding).
# Each wait below ends at a deadline, however long one probe takes.
ctld_up=0
for _ in 1 2 3; do
  write_conf "$(free_port)" "$(free_port)"
  timeout 15 slurmctld -f "$conf" -i 2>"$tmp/daemon.err" || skip_daemon "slurmctld did not start (exit $?)"
  deadline=$((SECONDS + 20))
  while ((SECONDS < deadline)); do
    timeout 3 scontrol ping 2>/dev/null | grep -q 'is UP' && { ctld_up=1; break; }
    sleep 0.2
  done
  [[ $ctld_up == 1 ]] && break
  stop_pidfile "$tmp/slurmctld.pid"
done
[[ $ctld_up == 1 ]] ||
  skip_daemon "slurmctld did not answer scontrol ping within 20 s (3 tries)" "$tmp/slurmctld.log"

# ---- slurmd as node "localhost"; the node must turn idle.
timeout 15 slurmd -f "$conf" -N localhost 2>"$tmp/daemon.err" || skip_daemon "slurmd did not start (exit $?)"
state=""
deadline=$((SECONDS + 30))
while ((SECONDS < deadline)); do
  state=$(timeout 3 sinfo -h -n localhost -o %T 2>/dev/null)
  [[ $state == idle ]] && break
  sleep 0.2
done
[[ $state == idle ]] ||
  skip_daemon "node localhost is '${state:-unknown}', not idle, 30 s after slurmd started" "$tmp/slurmd.log"
echo "cluster up: $(timeout 5 sinfo -h -o '%P %D %T %C %N')"

# The jobs start from this environment only: nothing of the caller's (MASTER_*,
# RANK, WORLD_SIZE, COHORT_*, OMP_*, SLURM_* ...) reaches them.
clean=(env -i "PATH=$(dirname "$cohort"):$PATH" "HOME=${HOME:-/root}" "SLURM_CONF=$conf" "TMPDIR=$tmp")
main_job=(cohort train --model net --dataset fashion-mnist --epochs 1)

check_run() {  # check_run WHAT OUTPUT
  local what=$1 out=$2
  grep -q 'DDP, 2 ranks x 1 threads' <<<"$out" ||
    fail "$what: expected 'DDP, 2 ranks x 1 threads' (world size from SLURM_NTASKS, threads from SLURM_CPUS_PER_TASK)"
  local acc
  acc=$(grep -o 'test accuracy [0-9.]*' <<<"$out" | head -n 1 | awk '{print $3}')
  [[ -n $acc ]] || fail "$what: no test accuracy in its output"
  awk -v a="$acc" 'BEGIN { exit !(a > 0.6) }' || fail "$what: test accuracy $acc after one epoch (expected > 0.6)"
  echo "$what: passed, test accuracy $acc"
}

# ---- 1. srun: each of the 2 tasks is one worker.
echo "==== srun -n 2 -c 1 ${main_job[*]}"
out=$(cd "$tmp" && timeout 240 "${clean[@]}" srun --job-name=cohort-srun --time=4 --kill-on-bad-exit=1 \
  -n 2 -c 1 "${main_job[@]}" 2>&1)
rc=$?
echo "$out"
[[ $rc == 0 ]] || fail "srun exited with $rc"
check_run srun "$out"

# ---- 2. sbatch: the batch script of docs/slurm.md as written, sized for this
# one node by options on sbatch's command line (they override #SBATCH lines).
awk '/^```bash file=train.sbatch$/ { inside = 1; next } inside && /^```/ { exit } inside' \
  "$doc" >"$tmp/train.sbatch"
grep -q '^srun .*' "$tmp/train.sbatch" || fail "no batch script (\`\`\`bash file=train.sbatch) in $doc"
echo "==== sbatch --wait --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 train.sbatch, from $doc:"
cat "$tmp/train.sbatch"
sub=$(cd "$tmp" && timeout 240 "${clean[@]}" sbatch --wait --parsable --nodes=1 --ntasks-per-node=2 \
  --cpus-per-task=1 --time=4 --output="$tmp/sbatch-%j.out" "$tmp/train.sbatch" 2>&1)
rc=$?
job=$(grep -o '^[0-9]*' <<<"$sub" | head -n 1)
out=$(cat "$tmp/sbatch-$job.out" 2>/dev/null)
echo "$out"
[[ $rc == 0 ]] || fail "sbatch --wait exited with $rc (job ${job:-?}): $sub"
check_run "sbatch (job $job)" "$out"
echo "PASSED: srun and sbatch runs of the main job"
