#!/usr/bin/env bash
# The whole `oomdoctor doctor --probe` on a real GPU: idle, then while a second process holds all but
# 300 MiB of GPU 0 (the seed's failure). Writes text/JSON/HTML reports under $1.
set -u
out=${1:-/tmp/doctor-live}; mkdir -p "$out"
export PYTHONPATH=$PWD/src
{ nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv; uname -r;
  python3 -c 'import torch,sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])'; } > "$out/machine.txt" 2>&1
rm -f /tmp/hog.ready  # a warm machine keeps /tmp: a stale marker would start the probe before the hog has allocated
t0=$(date +%s%N)
python3 -m oomdoctor doctor --format json -o "$out/idle-noprobe.json"; echo "idle no-probe exit $?" >> "$out/exit.txt"
t1=$(date +%s%N)
python3 -m oomdoctor doctor --probe > "$out/idle-probe.txt" 2>&1; echo "idle probe exit $?" >> "$out/exit.txt"
t2=$(date +%s%N)
echo "no-probe ms $(( (t1 - t0) / 1000000 )); probe ms $(( (t2 - t1) / 1000000 ))" >> "$out/exit.txt"
python3 - <<'PY' &
import torch, time, sys
free, total = torch.cuda.mem_get_info(0)
x = torch.empty(free - 300 * 2**20, dtype=torch.uint8, device="cuda:0")
open("/tmp/hog.ready", "w").write(str(free))
time.sleep(240)
PY
hog=$!
for i in $(seq 1 60); do [ -f /tmp/hog.ready ] && break; sleep 1; done
echo "hog pid $hog" >> "$out/exit.txt"
python3 -m oomdoctor doctor --probe > "$out/hog-probe.txt" 2>&1; echo "hog probe text exit $?" >> "$out/exit.txt"
python3 -m oomdoctor doctor --probe --format json -o "$out/hog-probe.json"; echo "hog probe json exit $?" >> "$out/exit.txt"
python3 -m oomdoctor doctor --probe --format html -o "$out/hog-probe.html"; echo "hog probe html exit $?" >> "$out/exit.txt"
kill $hog; wait $hog 2>/dev/null
cat "$out/exit.txt"; tail -40 "$out/hog-probe.txt"
