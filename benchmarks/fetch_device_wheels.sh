#!/usr/bin/env bash
# Run HERE (with registry access) before a device call: the lent H200 image has CuPy, torch,
# numpy, ml_dtypes, pytest and hypothesis for its Python 3.12, but no registry and no
# cryptography or MPICH.  Puts the missing wheels in .whl/ (ignored by git; carried by the call).
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl cryptography cffi pycparser mpich "mpi4py>=4"
ls -la .whl
