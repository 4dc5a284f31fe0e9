#!/usr/bin/env bash
# Records each job under `oomdoctor record`; reports (text and JSON) and runs go into $OUT/record_host_gpu/runs.tar.gz.
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
D=$OUT/record_host_gpu; mkdir -p "$D"; W=$(mktemp -d)
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import sys, torch, transformers; print(sys.version.split()[0], torch.__version__, torch.version.cuda, transformers.__version__)"; } > "$D/versions.txt" 2>&1
for job in gpu_pinned_loader gpu_gpt2_amp gpu_host_leak gpu_device_leak gpu_memmap; do
  python3 -m oomdoctor record --dir "$W/$job" -- python3 "validation/record_host_gpu/$job.py" > "$W/$job.out" 2>&1
  rec=$?
  python3 -m oomdoctor report "$W/$job" > "$W/$job.txt" 2>&1; rep=$?
  python3 -m oomdoctor report "$W/$job" --format json -o "$W/$job.json" > /dev/null 2>&1
  echo "$job record_exit=$rec report_exit=$rep" | tee -a "$D/summary.txt"
  head -n 8 "$W/$job.txt"
done
tar -C "$W" -czf "$D/runs.tar.gz" .
