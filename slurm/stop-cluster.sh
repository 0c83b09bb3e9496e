#!/usr/bin/env bash
# Stop the single-node cluster that slurm/start-cluster.sh started: cancel every job, wait for
# their processes to go (slurmstepd can outlive a job's squeue entry by a second), then stop
# slurmd, slurmctld and munged by the PIDs in their pid files.
set -uo pipefail

[ "$(id -u)" -eq 0 ] || { echo "stop-cluster.sh: run as root" >&2; exit 1; }

if scontrol ping 2>/dev/null | grep -q UP; then
    jobs=$(squeue -h -o %A | sort -u)
    [ -z "$jobs" ] || scancel $jobs
    for _ in $(seq 150); do
        [ -z "$(squeue -h -o %A)" ] && ! pgrep -x slurmstepd >/dev/null && break
        sleep 0.2
    done
fi

stop() {  # stop NAME PIDFILE: TERM, wait up to 10 s, then KILL
    local name=$1 pidfile=$2 pid
    [ -s "$pidfile" ] || return 0
    pid=$(cat "$pidfile")
    kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; return 0; }
    kill "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
        echo "$name ($pid) did not stop; killing it" >&2
        kill -9 "$pid"
    fi
    rm -f "$pidfile"
}

stop slurmd /run/slurmd.pid
stop slurmctld /run/slurmctld.pid
stop munged /run/munge/munged.pid
echo "Slurm stopped" >&2
