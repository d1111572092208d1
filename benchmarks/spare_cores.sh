#!/usr/bin/env bash
# aes-256-gcm allreduce on 2 ranks with the crypto pool on a node with cores to spare, side by
# side with one crypto thread a rank (seal and open on the calling thread), in turn: 1, N, 1, N
# threads.  Each run's table prints its own bounds (bound add: native + crypto on one core;
# bound ovl: max(native, crypto) on spare cores; vs bound: time / bound add): below 1, the crypto
# overlapped (or native MPI is slower than seccomm's own none: compare).  Needs at least 4 cores
# (else skipped); benchmarks/device_check.sh runs it on the GPU machine's cores.
#   bash benchmarks/spare_cores.sh          (tables and --json results under $OUT)
# The seccomm of $PYTHONPATH (or the installed one) runs; python3 is the interpreter unless
# PYTHON says otherwise.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PY=${PYTHON:-python3}
cores=$(nproc)
# (SecureComm's default for 2 ranks: cores / ranks, at most 8; POOL: another, to try the script)
pool=${POOL:-$(( cores / 2 > 8 ? 8 : cores / 2 ))}
if [ "$pool" -lt 2 ]; then
    echo "# spare cores: $cores cores for 2 ranks, no core to spare: skipped" | tee "$OUT/spare_cores.txt"
    exit 0
fi
rc=0
: > "$OUT/spare_cores.txt"
for run in 1 2; do
    for t in 1 "$pool"; do
        echo "## run $run, SECCOMM_CRYPTO_THREADS=$t" | tee -a "$OUT/spare_cores.txt"
        SECCOMM_CRYPTO_THREADS=$t timeout 240 "$PY" -m seccomm bench --np 2 -b 1M -e 64M -f 4 \
            --suites none,aes-256-gcm --json "$OUT/spare_cores_t${t}_run$run.json" 2>&1 \
            | tee -a "$OUT/spare_cores.txt"
        [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
    done
done
# the aes-256-gcm rows of every run: size, time, bound add, bound ovl, vs bound
grep -E "^## run|^ +[0-9]+ .* aes-256-gcm " "$OUT/spare_cores.txt" | awk '/^##/ {print; next} {print $1, $6, $10, $11, $12}'
exit $rc
