"""How much memory a ``seccomm bench`` sweep needs on one node, checked before any rank starts.

Per rank, for a message of S bytes (nccl-tests' S: the whole array), measured with ``ru_maxrss``
on 2 ranks at S = 256 MiB (allreduce, ``-n 3 -w 1``, AMD EPYC): 6.0 S with ``--suites
aes-256-gcm``, 6.5 S with ``none,aes-256-gcm``, 9.0 S with ``none,aes-256-gcm,chacha20-poly1305``,
each over the interpreter's 60 MB.  So: 3.5 S for the send buffer, native MPI's result, the one
result buffer the suites share and MPI's own copies; 2.5 S for each keyed suite (its send and
receive frames, the wire copies of the pipelined hops) and 0.5 S for ``none`` (no ciphertext).
"""

from __future__ import annotations

import os

#: bytes a rank uses before any buffer (the interpreter, numpy, mpi4py, cryptography)
BASE_BYTES = 60 << 20
#: multiples of S: every run; each keyed suite; the none suite (see the module docstring)
PER_RUN, PER_KEYED, PER_NONE = 3.5, 2.5, 0.5


def rank_bytes(nbytes: int, suites: list[str]) -> int:
    """Peak bytes one rank of a sweep whose largest message is ``nbytes`` needs (estimate)."""
    keyed = sum(1 for s in suites if s != "none")
    factor = PER_RUN + PER_KEYED * keyed + PER_NONE * (len(suites) - keyed)
    return int(BASE_BYTES + factor * nbytes)


def available_bytes() -> int | None:
    """Memory this process may still use: ``MemAvailable`` of ``/proc/meminfo``, or less where a
    cgroup v2 limit (``memory.max`` minus ``memory.current``) is lower; None where neither can
    be read (then nothing is checked)."""
    found = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/proc/self/cgroup") as f:
            rel = next((ln.split(":", 2)[2].strip() for ln in f if ln.startswith("0::")), None)
        if rel is not None:
            base = os.path.join("/sys/fs/cgroup", rel.lstrip("/"))
            with open(os.path.join(base, "memory.max")) as f:
                limit = f.read().strip()
            if limit != "max":
                with open(os.path.join(base, "memory.current")) as f:
                    found.append(int(limit) - int(f.read().strip()))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def memory_error(maxbytes: int, suites: list[str], local_ranks: int) -> str | None:
    """The one-line refusal of a sweep whose largest size ``maxbytes`` does not fit the memory
    of this node for ``local_ranks`` ranks (:func:`rank_bytes` each), or None when it fits or
    nothing can be read."""
    per, free = rank_bytes(maxbytes, suites), available_bytes()
    if free is None or per * local_ranks <= free:
        return None
    return (
        f"-e/--maxbytes {maxbytes:,} B needs about {per * local_ranks / 1e9:.1f} GB on this node "
        f"({local_ranks} rank(s) x {per / 1e9:.1f} GB: the send buffer, the results and each "
        f"suite's frames), and {free / 1e9:.1f} GB is available: use a smaller -e, "
        f"fewer --suites, or fewer ranks"
    )
