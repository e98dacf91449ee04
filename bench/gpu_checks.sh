#!/usr/bin/env bash
# The device checks, as one script for a lent GPU machine (its image holds torch, not vigil's
# platform packages: wheels for those may be carried in .devwheels/). Never part of `make test`.
# Writes the new bench/RESULTS.md rows and the logs to $OUT (or ./gpu-out).
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD
[ -d .devwheels ] && python3 -m pip install -q --no-index --find-links .devwheels \
  pydantic pydantic-settings msgspec cryptography confluent-kafka clickhouse-connect google-re2 >"$OUT/pip.log" 2>&1
before=$(wc -c <bench/RESULTS.md)
{ nvidia-smi -L; python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name())"; nproc; } 2>&1 | tee "$OUT/device.txt"
timeout 150 python3 bench/gpu_timer_overhead.py 2>&1 | tee "$OUT/timer.log" | tail -25
timeout 150 python3 -m pytest --noconftest -p no:cacheprovider -m gpu -q -rA \
  tests/timer/test_timer_cuda.py tests/recovery/test_checkpoint.py 2>&1 | tee "$OUT/pytest_gpu.log" | tail -15
timeout 240 python3 bench/checkpoint.py 2>&1 | tee "$OUT/checkpoint.log" | tail -30
for mib in 50 500; do
  timeout 120 python3 bench/snapshot.py --device cuda --mib $mib --step-ms 100,500 2>&1 | tee -a "$OUT/snapshot.log" | tail -12
done
tail -c +"$((before + 1))" bench/RESULTS.md >"$OUT/results_new.md"
