#!/usr/bin/env bash
# Run on a machine with registry access, before benchmarks/device_check.sh on a GPU machine
# without one (benchmarks/README.md).  That machine is expected to have CuPy, torch, numpy,
# ml_dtypes and pytest for Python 3.12, but no cryptography, MPICH or mpi4py: this puts their
# wheels (CPython 3.12, manylinux x86_64) in .whl/, which git ignores; copy it along with the
# checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl cryptography cffi pycparser mpich "mpi4py>=4"
ls -la .whl
