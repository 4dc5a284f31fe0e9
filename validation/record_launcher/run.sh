#!/usr/bin/env bash
# See README.md. Writes under $OUT/record_launcher.
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
D=$OUT/record_launcher; mkdir -p "$D"; W=$(mktemp -d); V=validation/record_launcher
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import sys, torch, transformers; print(sys.version.split()[0], torch.__version__, torch.version.cuda, transformers.__version__)"
  uname -r; stat -fc %T /sys/fs/cgroup; cat /proc/self/cgroup; dmesg 2>&1 | tail -n 1 | cut -c1-200; } > "$D/env.txt" 2>&1
rep() { python3 -m oomdoctor report "$W/$1" > "$W/$1.txt" 2>&1; echo "$1 report_exit=$?" | tee -a "$D/summary.txt"
        python3 -m oomdoctor report "$W/$1" --format json -o "$W/$1.json" > /dev/null 2>&1; head -n 30 "$W/$1.txt"; }
TR="python3 -m torch.distributed.run --nproc-per-node 2"
# 1. a rank taken by the OOM killer in a child cgroup
CG=/sys/fs/cgroup/oomdoctor-val-$$
if mkdir "$CG" 2>/dev/null && echo 4G > "$CG/memory.max" 2>/dev/null && echo 0 > "$CG/memory.swap.max" 2>/dev/null; then
  ( echo $BASHPID > "$CG/cgroup.procs" && exec python3 -m oomdoctor record --dir "$W/torchrun_hog" -- $TR --master-port 29611 $V/rank_job.py hog ) > "$W/torchrun_hog.out" 2>&1
  echo "torchrun_hog record_exit=$? memory.events: $(tr '\n' ' ' < "$CG/memory.events")" | tee -a "$D/summary.txt"
  rep torchrun_hog; rmdir "$CG" 2>/dev/null
else
  echo "torchrun_hog: skipped (no child cgroup with a memory limit here)" | tee -a "$D/summary.txt"
fi
# 2. a rank that raises, with run 1's kill line still in the kernel log
python3 -m oomdoctor record --dir "$W/torchrun_raise" -- $TR --master-port 29612 $V/rank_job.py raise > "$W/torchrun_raise.out" 2>&1
echo "torchrun_raise record_exit=$?" | tee -a "$D/summary.txt"; rep torchrun_raise
# 3-4. the HF callback
for how in clean oom; do
  python3 $V/hf_job.py "$W/hf_$how" $how > "$W/hf_$how.out" 2>&1; echo "hf_$how job_exit=$?" | tee -a "$D/summary.txt"
  rep hf_$how; python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1])), indent=1)[:1500])" "$W/hf_$how/run.json" >> "$D/summary.txt" 2>&1
done
dmesg 2>/dev/null | grep -i "killed process" | tail -n 5 > "$D/dmesg_kills.txt"
rm -rf "$W"/*-trainer
tar -C "$W" -czf "$D/runs.tar.gz" .
