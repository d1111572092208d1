#!/usr/bin/env bash
# The whole GPU check in one call on a lent machine (docs/gpu.md, "Running the device check"):
#   run(command="bash benchmarks/device_check.sh", carry=[".whl"], timeout_s=540)
# after benchmarks/fetch_device_wheels.sh here.  Everything lands under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv 2>&1 | tee "$OUT/gpu.txt"
python3 -c "import cupy, mpi4py, cryptography; print('cupy', cupy.__version__, 'mpi4py', mpi4py.__version__, 'cryptography', cryptography.__version__)" 2>&1 | tee -a "$OUT/gpu.txt"
timeout 300 python3 benchmarks/gpu_check.py --out "$OUT" 2>&1 | tee "$OUT/gpu_check.log"
timeout 180 python3 -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider 2>&1 | tee "$OUT/test_gpu.log"
tail -40 "$OUT/gpu_check.log"
