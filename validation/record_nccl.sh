#!/usr/bin/env bash
# 2-GPU NCCL run recorded with `oomdoctor record`, then the merged per-rank report. Needs 2 GPUs.
set -u
out=${1:-/tmp/record-nccl}; mkdir -p "$out"
export PYTHONPATH=$PWD/src:${PYTHONPATH:-}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
{ nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; uname -r;
  python3 -c 'import torch; print(torch.__version__, torch.cuda.nccl.version())'; } > "$out/machine.txt" 2>&1
run=/tmp/nccl-run; rm -rf "$run"
python3 -m oomdoctor record --dir "$run" -- torchrun --standalone --nproc_per_node=2 validation/record_nccl_ddp.py > "$out/record.log" 2>&1
echo "record exit $?" >> "$out/record.log"
python3 -m oomdoctor report "$run" --format text > "$out/report.txt" 2>&1; echo "report exit $?" >> "$out/record.log"
python3 -m oomdoctor report "$run" --format json -o "$out/report.json"
python3 -m oomdoctor report "$run" --format html -o "$out/report.html"
ls -la "$run" >> "$out/record.log"
tar czf "$out/run.tar.gz" -C /tmp nccl-run
cat "$out/record.log"; head -60 "$out/report.txt"
