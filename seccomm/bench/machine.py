"""Where a result was measured: host, CPU and its AES flags, library versions, commit, time."""

from __future__ import annotations

import datetime
import os
import platform
import socket
import subprocess
from pathlib import Path


def cpu_info() -> dict:
    model, flags = platform.processor() or "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model in ("unknown", "", platform.processor()):
                model = line.split(":", 1)[1].strip()
            elif line.startswith(("flags", "Features")):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    return {
        "model": model,
        "cores": os.cpu_count(),
        "aes": "aes" in flags,
        "vaes": "vaes" in flags,
        "pclmulqdq": "pclmulqdq" in flags,
    }


def git_commit() -> str | None:
    """HEAD of the source tree seccomm runs from, with ``-dirty`` when tracked files differ."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if out.returncode != 0 or not out.stdout.strip():
            return None
        dirty = (
            subprocess.run(
                ["git", "-C", str(here), "diff", "--quiet", "HEAD", "--"], capture_output=True, timeout=5
            ).returncode
            == 1
        )
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def machine_info() -> dict:
    import cryptography
    import mpi4py
    import numpy
    from cryptography.hazmat.backends.openssl import backend
    from mpi4py import MPI

    from .. import __version__, pairswap

    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu_info(),
        "openssl": backend.openssl_version_text(),
        "cryptography": cryptography.__version__,
        "mpi_library": MPI.Get_library_version().splitlines()[0].strip(),
        "mpi4py": mpi4py.__version__,
        "numpy": numpy.__version__,
        "seccomm": __version__,
        "pair_path": pairswap.status(),  # (the compiled two-rank swap, or why not: one line)
        "git_commit": git_commit(),
        "utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
