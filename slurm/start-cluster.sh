#!/usr/bin/env bash
# Start a real single-node Slurm cluster on this Debian/Ubuntu machine, as root, without systemd:
# munge, slurmctld and slurmd on 127.0.0.1, one partition "debug" holding this node.
# It is for trying the suite's Slurm path (and for CI), not for production.
#
#   sudo slurm/start-cluster.sh        # installs the packages if needed, writes /etc/slurm/slurm.conf
#   sbatch / squeue / sinfo ...         # then the usual commands work
#   sudo slurm/stop-cluster.sh          # cancels every job, stops the daemons
#
# It refuses to overwrite a slurm.conf it did not write. Why the settings: containers without
# systemd have no cgroups for slurmd, hence proctrack/linuxproc and task/none; a short
# cred_expire lets a requeued job start again within seconds instead of two minutes.
set -euo pipefail

conf=/etc/slurm/slurm.conf
marker="# written by grokking-suite slurm/start-cluster.sh"
host=$(hostname -s)

[ "$(id -u)" -eq 0 ] || { echo "start-cluster.sh: run as root" >&2; exit 1; }

packages=(slurmctld slurmd slurm-client munge)
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null \
    || ! command -v munged >/dev/null; then
    echo "installing ${packages[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends "${packages[@]}" >/dev/null \
        || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${packages[@]}" >/dev/null; }
fi

if scontrol ping 2>/dev/null | grep -q UP && sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
    echo "a Slurm cluster is already up here" >&2
    exit 0
fi

if [ -e "$conf" ] && ! grep -qF "$marker" "$conf"; then
    echo "start-cluster.sh: $conf exists and was not written by this script; leaving it alone" >&2
    exit 1
fi

# munge authenticates every Slurm message.
mkdir -p /run/munge && chown munge:munge /run/munge && chmod 0755 /run/munge
[ -s /etc/munge/munge.key ] || runuser -u munge -- /usr/sbin/mungekey --create 2>/dev/null \
    || { dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null && chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key; }
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    runuser -u munge -- /usr/sbin/munged --force
    for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
    munge -n | unmunge >/dev/null
fi

# The node as a count of CPUs, without its socket/core/thread layout: with a layout, Slurm gives
# each job whole cores, so on a machine of one core with two hardware threads two 1-CPU array tasks could
# never run side by side. A node claiming more memory than it has is drained.
cpus=$(slurmd -C | head -n1 | sed -n 's/.*CPUs=\([0-9]*\).*/\1/p')
memory=$(slurmd -C | head -n1 | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
memory=$((memory * 95 / 100))

mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
cat > "$conf" <<EOF
$marker
ClusterName=suite
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=cred_expire=10
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=1024
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
KillWait=10
SchedulerParameters=batch_sched_delay=0,bf_interval=1,sched_min_interval=0,sched_interval=2
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF

slurmctld
for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.2; done
scontrol ping | grep -q UP || { echo "slurmctld did not come up; see /var/log/slurm/slurmctld.log" >&2; exit 1; }

slurmd -N "$host"
for _ in $(seq 100); do sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)' && break; sleep 0.2; done
if ! sinfo -h -o %t | grep -qE '^(idle|mix|alloc)'; then
    echo "node $host is not idle: $(sinfo -h -N -o '%t %E')); see /var/log/slurm/slurmd.log" >&2
    exit 1
fi
echo "Slurm is up: partition debug, node $host ($(sinfo -h -o '%c CPUs, %m MB'))" >&2
