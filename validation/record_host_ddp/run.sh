#!/usr/bin/env bash
# Records each DDP job (torchrun, 2 ranks, NCCL) under `oomdoctor record`; reports (text, JSON) and the run
# directories go into $OUT/record_host_ddp/.
set -u
export PYTHONPATH=$PWD/src:$PWD/validation/record_host_ddp PYTHONUNBUFFERED=1
D=$OUT/record_host_ddp; mkdir -p "$D"; W=$(mktemp -d)
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda)"; } > "$D/versions.txt" 2>&1
for job in ${JOBS:-ddp_healthy ddp_rank1_host_leak ddp_long_healthy}; do
  start=$(date +%s)
  python3 -m oomdoctor record --dir "$W/$job" -- torchrun --standalone --nproc_per_node 2 \
    "validation/record_host_ddp/$job.py" > "$W/$job.out" 2>&1
  rec=$?
  python3 -m oomdoctor report "$W/$job" > "$W/$job.txt" 2>&1; rep=$?
  python3 -m oomdoctor report "$W/$job" --format json -o "$W/$job.json" > /dev/null 2>&1
  echo "$job record_exit=$rec report_exit=$rep seconds=$(( $(date +%s) - start ))" | tee -a "$D/summary.txt"
  ls "$W/$job" | tr '\n' ' '; echo
  head -n 30 "$W/$job.txt"
done
tar -C "$W" -czf "$D/runs.tar.gz" .
