#!/usr/bin/env bash
# Device validation for `oomdoctor record` / `report` (docs/validation/record.md). Writes under $OUT
# at most 8 files: 3 HTML + 3 JSON reports, runs.tar.gz (the run dirs and logs), overhead.json.
set -u
export PYTHONPATH=$PWD/src
export PYTHONUNBUFFERED=1
W=$(mktemp -d)
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import sys, torch, torchvision, transformers; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torchvision.__version__, transformers.__version__)"
  python3 -c "import psutil; print('psutil', psutil.__version__)" 2>&1 | tail -n 1
} > "$W/versions.txt" 2>&1
cat "$W/versions.txt"
for name in ${RUNS:-leak fragment oom}; do
  eval "flags=\${FLAGS_$name:-}"
  echo "== oomdoctor record --dir run-$name $flags -- python3 validation/record_$name.py"
  s=$(date +%s%N)
  python3 -m oomdoctor record --dir "$W/run-$name" $flags -- python3 "validation/record_$name.py" > "$W/run-$name.stdout" 2> "$W/run-$name.stderr"
  echo "exit=$? ms=$(( ($(date +%s%N) - s) / 1000000 ))"
  tail -n 3 "$W/run-$name.stdout"; tail -n 2 "$W/run-$name.stderr"
  python3 -m oomdoctor report "$W/run-$name" --format html -o "$OUT/record-$name.html"
  python3 -m oomdoctor report "$W/run-$name" --format json -o "$OUT/record-$name.json"
  python3 -m oomdoctor report "$W/run-$name" > "$W/record-$name.txt"; echo "report exit=$?"
  head -n 12 "$W/record-$name.txt"
done
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  echo "== python3 bench/record_overhead.py ${BENCH_ARGS:-}"
  python3 bench/record_overhead.py ${BENCH_ARGS:-} --json "$OUT/overhead.json" 2>&1 | grep -v -i warning | tee "$W/overhead.txt"
fi
tar -C "$W" -czf "$OUT/runs.tar.gz" .
