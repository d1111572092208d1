"""An emulated cluster as a context manager, and the MPMD ``mpiexec`` line that places ranks on
its hosts.

``with Cluster(spec) as c: c.run([...])`` builds the namespaces and links, runs commands on
every rank, and tears everything down when the block ends: normally, on an error, on Ctrl-C
(SIGINT raises ``KeyboardInterrupt``) and on SIGTERM or SIGHUP (raised here as
:class:`Interrupted`).  Signals are ignored while the teardown runs.

Ranks are placed in blocks of ``ranks_per_host`` per host with MPICH's MPMD syntax, each through
``ip netns exec HOST unshare --uts --mount sh -c WRAPPER HOST SHM ...``: a host's ranks share its
namespace, its host name (what seccomm's topology keys on, so that ``encrypt="inter-node"``
applies between hosts) and its own ``/dev/shm`` (``SHM``, :func:`.netns.shm_dir`, bound there in
the rank's mount namespace; teardown deletes it, so nothing is left in the machine's).
``UCX_TLS=tcp,self`` and ``MPIR_CVAR_NOLOCAL=1`` keep MPICH off shared memory, so rank-to-rank
traffic between hosts
crosses the emulated links (between ranks of one host it stays inside the host: loopback).
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from . import netns
from .spec import ClusterSpec

#: the signals that end a lab run with a teardown (SIGINT: Python's KeyboardInterrupt)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
#: environment of every rank: MPICH over TCP (UCX), no shared memory between ranks
MPI_ENV = {"UCX_TLS": "tcp,self", "MPIR_CVAR_NOLOCAL": "1", "PYTHONUNBUFFERED": "1"}
#: the per-rank wrapper: the host's namespace and host name, then the command
#: each rank, in its host's namespace: the host name, and the host's own /dev/shm ($1, bound in a
#: mount namespace of the rank's own: the machine's /dev/shm is never written)
WRAPPER = 'hostname "$0" && mount --bind "$1" /dev/shm && shift && exec "$@"'


class Interrupted(BaseException):
    """SIGTERM or SIGHUP arrived during a lab run (raised in the main thread; ``signum``)."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")


def _stop(signum, _frame):
    raise Interrupted(signum)


@dataclass
class RunResult:
    """One launch: exit status, wall time [s], CPU time [s] of the run's processes (the ranks and
    their launcher, and the tunnel daemons' share during the launch), and the whole machine's
    busy fraction meanwhile (every process, other users' included: /proc/stat)."""

    returncode: int
    wall_s: float
    cpu_s: float
    machine_busy: float


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of all CPUs since boot (/proc/stat; idle and iowait are idle)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)


def _cpu_s(pids: list[int]) -> dict[int, float]:
    """CPU seconds (user + system) of each live process in ``pids``."""
    hz, out = os.sysconf("SC_CLK_TCK"), {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[pid] = (int(fields[11]) + int(fields[12])) / hz
        except (OSError, IndexError, ValueError):
            continue
    return out


class Cluster:
    """The cluster of ``spec``, built on ``__enter__`` and torn down on ``__exit__``.  Use it
    from the main thread (it installs signal handlers); :class:`~.netns.LabError` when a build
    command fails."""

    def __init__(self, spec: ClusterSpec, mpiexec: str | None = None):
        self.spec = spec
        self.mpiexec = mpiexec
        self._saved: dict = {}

    def __enter__(self) -> "Cluster":
        self._saved = {s: signal.signal(s, _stop) for s in STOP_SIGNALS}
        try:
            netns.build(self.spec)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Tear down (signals ignored meanwhile), then restore the signal handlers."""
        held = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, *STOP_SIGNALS)}
        try:
            netns.teardown(self.spec.prefix)
        finally:
            for s, h in held.items():
                signal.signal(s, self._saved.get(s, h))
            self._saved = {}

    def env(self, extra: dict | None = None) -> dict:
        """The environment of everything started on the cluster: the run mark, MPI over TCP."""
        env = dict(os.environ, **MPI_ENV, **(extra or {}))
        env[netns.RUN_ENV] = self.spec.prefix
        return env

    def mpmd(
        self, argv: list[str], devices: list[str] | None = None, host_env: list | None = None
    ) -> list[str]:
        """The ``mpiexec`` line running ``argv`` on every rank, ranks in blocks per host;
        ``devices[i]``: the interface host ``i``'s ranks use (``UCX_NET_DEVICES``, default eth0);
        ``host_env[i]``: more environment variables of host ``i``'s ranks (its identity files)."""
        from ..launch import find_mpiexec

        cmd = [self.mpiexec or find_mpiexec() or "mpiexec"]
        for i in range(self.spec.hosts):
            h, dev = self.spec.host(i), (devices[i] if devices else "eth0")
            cmd += [":"] if i else []
            cmd += ["-n", str(self.spec.ranks_per_host), "ip", "netns", "exec", h]
            shm = str(netns.shm_dir(self.spec.prefix, h))
            cmd += [
                "unshare",
                "--uts",
                "--mount",
                "sh",
                "-c",
                WRAPPER,
                h,
                shm,
                "env",
                f"UCX_NET_DEVICES={dev}",
                *(f"{k}={v}" for k, v in (host_env[i] if host_env else {}).items()),
            ]
            cmd += argv
        return cmd

    def run(self, argv, time_limit: float, devices=None, env=None, stdout=None, host_env=None) -> RunResult:
        """Run ``argv`` on every rank and wait, at most ``time_limit`` seconds (then every
        process of the run is ended and the status is 124).  Output goes to ``stdout``
        (default: this process's)."""
        daemons = _cpu_s(netns.marked_pids(self.spec.prefix))  # already running: tunnels
        before, ticks, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), _machine_ticks(), time.monotonic()
        proc = subprocess.Popen(
            self.mpmd(argv, devices, host_env), env=self.env(env), stdout=stdout, start_new_session=True
        )
        try:
            code = proc.wait(timeout=time_limit)
        except subprocess.TimeoutExpired:
            print(f"seccomm cluster: time limit {time_limit:g} s reached, ending the ranks", file=sys.stderr)
            netns.end_processes(self.spec.prefix)
            proc.wait()
            code = 124
        wall, ticks2 = time.monotonic() - t0, _machine_ticks()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        cpu += sum(t - daemons.get(pid, t) for pid, t in _cpu_s(list(daemons)).items())
        busy = (ticks2[0] - ticks[0]) / max(1, ticks2[1] - ticks[1])
        return RunResult(code, wall, cpu, busy)

    def counters(self) -> dict:
        """``{host: {"rx": bytes, "tx": bytes}}`` of every host's link (and ``uplink K`` ends on
        the rack side, when there are racks)."""
        out = {self.spec.host(i): netns.counters(self.spec.host(i)) for i in range(self.spec.hosts)}
        if self.spec.racks > 1:
            for k in range(self.spec.racks):
                out[f"uplink {k}"] = netns.counters(self.spec.switch_ns, f"{self.spec.prefix}u{k}")
        return out
