#!/usr/bin/env bash
# The whole GPU check in one script, for a GPU machine that cannot reach a package registry
# (benchmarks/README.md):
#   OUT=DIR bash benchmarks/device_check.sh      (from the checkout's root; OUT defaults to /tmp/out)
# .whl/ must hold the wheels of benchmarks/fetch_device_wheels.sh, run before on a machine with
# registry access.  Everything lands under $OUT; the exit status is 1 if any step failed, else 0.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# --prefix, not --target: the mpich wheel's data files (bin/mpiexec, lib/libmpi.so*) must land too
python3 -m pip install -q --ignore-installed --no-index --no-deps --no-compile --no-cache-dir --prefix /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
# where pip put them: lib/pythonX.Y/site-packages, or local/lib/.../dist-packages on a Debian Python
SITE=$(find /tmp/site -maxdepth 6 -type d -name cryptography -path '*-packages/cryptography' | head -1)
SITE=${SITE%/cryptography}
[ -n "$SITE" ] || { echo "installed wheels not found under /tmp/site"; exit 1; }
export PYTHONPATH=$SITE:$PWD PATH=/tmp/site/bin:/tmp/site/local/bin:$PATH PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=/tmp/site/lib:/tmp/site/local/lib:${LD_LIBRARY_PATH:-}
rc=0
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv 2>&1 | tee "$OUT/gpu.txt"
python3 -c "import cupy, mpi4py, cryptography; from mpi4py import MPI; print('cupy', cupy.__version__, 'mpi4py', mpi4py.__version__, 'cryptography', cryptography.__version__, MPI.Get_library_version().splitlines()[0])" 2>&1 | tee -a "$OUT/gpu.txt" || rc=1
timeout 300 python3 benchmarks/gpu_check.py --out "$OUT" 2>&1 | tee "$OUT/gpu_check.log" || rc=1
timeout 180 python3 -m pytest -q -m gpu tests/gpu/test_gpu.py -p no:cacheprovider 2>&1 | tee "$OUT/test_gpu.log" || rc=1
# the crypto pool on the machine's cores to spare (2 ranks), CPU only
timeout 150 bash benchmarks/spare_cores.sh > "$OUT/spare_cores.log" 2>&1 || rc=1
tail -20 "$OUT/spare_cores.log"
tail -40 "$OUT/gpu_check.log"
exit $rc
