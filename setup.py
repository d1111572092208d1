"""Builds seccomm's one compiled module, ``seccomm.pairswap._pairswap`` (the repeated two-rank
swap: seccomm/pairswap/), against the ``mpich`` wheel's ``mpi.h`` and ``libmpi.so.12`` (the
``mpich`` and ``mpi4py`` packages are build requirements in pyproject.toml; mpi4py loads the
same library at run time).  The extension is optional: where it cannot be built (no C compiler,
no ``mpi.h``), the install goes on and seccomm takes the Python path, which ``seccomm bench``
says in one line of its header (``seccomm.pairswap.status``).  Everything else is in
pyproject.toml."""

import os
from importlib import metadata

from setuptools import Extension, setup


def _mpich_dirs():
    """(include dirs, library dirs) of the installed ``mpich`` wheel, or ([], []) without one."""
    try:
        files = metadata.files("mpich") or []
    except metadata.PackageNotFoundError:
        return [], []
    inc = {os.path.dirname(f.locate()) for f in files if str(f).endswith("/mpi.h")}
    lib = {os.path.dirname(f.locate()) for f in files if os.path.basename(str(f)) == "libmpi.so.12"}
    return sorted(os.path.normpath(d) for d in inc), sorted(os.path.normpath(d) for d in lib)


_inc, _lib = _mpich_dirs()
setup(
    ext_modules=[
        Extension(
            "seccomm.pairswap._pairswap",
            ["seccomm/pairswap/_pairswap.c"],
            include_dirs=_inc,
            library_dirs=_lib,
            # -lmpi: libmpi.so.12 by its soname, which mpi4py has loaded by the time seccomm
            # imports this module (seccomm.pairswap.built)
            libraries=["mpi"] if _lib else [],
            optional=True,
        )
    ]
)
