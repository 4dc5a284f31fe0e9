#!/usr/bin/env bash
# SIGKILL verdicts of `report` on a GPU host: a job killed with `kill -9` from outside, and (where cgroup v2 lets us
# make a child group) a job killed by the kernel's OOM killer at a 3 GiB memory.max. Writes under $OUT/record_sigkill.
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
D=$OUT/record_sigkill; mkdir -p "$D"; W=$(mktemp -d)
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda)"
  uname -r; stat -fc %T /sys/fs/cgroup; cat /proc/self/cgroup; dmesg 2>&1 | tail -n 1 | cut -c1-200; } > "$D/env.txt" 2>&1
# 1. kill -9 from outside after ~6 s
python3 -m oomdoctor record --dir "$W/killed" -- python3 validation/record_sigkill/sleeper.py > "$W/killed.out" 2>&1 &
R=$!; sleep 6; pkill -9 -f "^python3 validation/record_sigkill/sleeper.py"; wait $R; echo "killed record_exit=$?" | tee -a "$D/summary.txt"
python3 -m oomdoctor report "$W/killed" > "$W/killed.txt" 2>&1; echo "killed report_exit=$?" | tee -a "$D/summary.txt"
python3 -m oomdoctor report "$W/killed" --format json -o "$W/killed.json" > /dev/null 2>&1
cat "$W/killed.txt" | head -n 25
# 2. the kernel's OOM killer in a child cgroup (cgroup v2, if we may make one)
CG=/sys/fs/cgroup/oomdoctor-val-$$
if mkdir "$CG" 2>/dev/null && echo 3G > "$CG/memory.max" 2>/dev/null && echo 0 > "$CG/memory.swap.max" 2>/dev/null; then
  ( echo $BASHPID > "$CG/cgroup.procs" && exec python3 -m oomdoctor record --dir "$W/cgroup_oom" -- python3 validation/record_sigkill/host_hog.py ) > "$W/cgroup_oom.out" 2>&1
  echo "cgroup_oom record_exit=$? memory.events: $(tr '\n' ' ' < "$CG/memory.events")" | tee -a "$D/summary.txt"
  python3 -m oomdoctor report "$W/cgroup_oom" > "$W/cgroup_oom.txt" 2>&1; echo "cgroup_oom report_exit=$?" | tee -a "$D/summary.txt"
  python3 -m oomdoctor report "$W/cgroup_oom" --format json -o "$W/cgroup_oom.json" > /dev/null 2>&1
  head -n 30 "$W/cgroup_oom.txt"
  rmdir "$CG" 2>/dev/null
else
  echo "cgroup_oom: skipped (cannot make a child cgroup with a memory limit here)" | tee -a "$D/summary.txt"
fi
tar -C "$W" -czf "$D/runs.tar.gz" .
