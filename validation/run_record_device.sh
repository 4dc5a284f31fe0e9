#!/usr/bin/env bash
# Device validation for `oomdoctor record` / `report` (docs/validation/record.md). Writes under $OUT.
set -u
export PYTHONPATH=$PWD/src
export PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import sys, torch, torchvision, transformers; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torchvision.__version__, transformers.__version__)"
  python3 -c "import psutil; print('psutil', psutil.__version__)" 2>&1 | tail -1
  python3 -c "import pynvml; print('nvidia-ml-py ok')" 2>&1 | tail -1
} > "$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"
for name in leak fragment oom; do
  echo "== record $name"
  start=$(date +%s.%N)
  python3 -m oomdoctor record --dir "$OUT/run-$name" -- python3 "validation/record_$name.py" > "$OUT/run-$name.stdout" 2> "$OUT/run-$name.stderr"
  echo "exit=$? seconds=$(echo "$(date +%s.%N) - $start" | bc)"
  tail -3 "$OUT/run-$name.stdout" "$OUT/run-$name.stderr"
  python3 -m oomdoctor report "$OUT/run-$name" --format html -o "$OUT/record-$name.html"
  python3 -m oomdoctor report "$OUT/run-$name" --format json -o "$OUT/record-$name.json"
  python3 -m oomdoctor report "$OUT/run-$name" > "$OUT/record-$name.txt"; echo "report exit=$?"
  head -8 "$OUT/record-$name.txt"
done
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  echo "== overhead"
  python3 bench/record_overhead.py --json "$OUT/overhead.json" 2>&1 | grep -v Warning
fi
