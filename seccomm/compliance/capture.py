"""Packet capture on loopback (root or ``CAP_NET_RAW``): the wire check on what really crossed
the network stack.

:class:`LoopbackCapture` records every packet on ``lo`` through an ``AF_PACKET`` socket;
:func:`capture_check` runs local ranks over TCP (as between nodes) per suite, captures their
traffic and searches it for the ranks' inputs with :func:`~seccomm.compliance.evidence.find_plaintext`.
Each rank of the job is this module run as ``python -m seccomm.compliance.capture SUITE COUNT SALT
SETTINGS_JSON``; every ``SecureComm`` runs under the configuration under review
(:class:`~seccomm.compliance.config.ReviewConfig`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from ..transports.wrappers import RecordingTransport
from .config import ReviewConfig
from .evidence import CHECK_SUITES, ENCRYPTING, find_plaintext, frames_found, gradients

#: environment that makes local MPICH ranks talk TCP over loopback, as ranks on two nodes do
TCP_ENV = {"MPIR_CVAR_NOLOCAL": "1", "UCX_TLS": "tcp", "FI_PROVIDER": "tcp"}
_ETH_P_ALL = 0x0003


class LoopbackCapture:
    """Every packet on the loopback interface while running, through a Linux ``AF_PACKET``
    socket (needs root or ``CAP_NET_RAW``; ``PermissionError`` otherwise).  ``packets``: list of
    ``(time, bytes)``, each an Ethernet frame as the kernel hands it over."""

    def __init__(self, interface: str = "lo"):
        import socket

        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(_ETH_P_ALL))
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, 33, 256 << 20)  # SO_RCVBUFFORCE: keep up
        except OSError:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
        self.sock.bind((interface, 0))
        self.sock.settimeout(0.1)
        self.packets: list[tuple[float, bytes]] = []
        self._stop = False
        self._thread = None

    def __enter__(self):
        import threading

        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self):
        import socket
        import time

        while not self._stop:
            try:
                data, addr = self.sock.recvfrom(1 << 18)
            except socket.timeout:
                continue
            if addr[2] != socket.PACKET_OUTGOING:  # loopback shows each packet twice
                self.packets.append((time.time(), data))

    def __exit__(self, *exc):
        self._stop = True
        self._thread.join()
        self.sock.close()

    def write_pcap(self, path) -> None:
        """Write the packets as a classic pcap file (LINKTYPE_ETHERNET), readable by Wireshark
        and tcpdump."""
        import struct

        with open(path, "wb") as f:
            f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 1 << 18, 1))
            for t, p in self.packets:
                f.write(struct.pack("<IIII", int(t), int((t % 1) * 1e6), len(p), len(p)))
                f.write(p)


def capture_check(
    suites=CHECK_SUITES,
    nranks: int = 2,
    count: int = 1 << 16,
    pcap_dir=None,
    timeout: float = 120.0,
    config: ReviewConfig | None = None,
) -> list[dict]:
    """Run ``nranks`` local ranks over TCP on loopback per suite (allreduce and allgather of
    random float32 gradients, ``count`` elements per rank, every ``SecureComm`` under
    ``config``'s settings, :meth:`ReviewConfig.settings`), capture every packet on ``lo``, and
    search the captured bytes for every rank's inputs.  The ranks also save the frames they
    handed to MPI; every one of them must be found in the capture (``frames_found == frames``),
    or the row is ``ok: False``: a capture that missed traffic proves nothing.

    Raises ``PermissionError`` without root/``CAP_NET_RAW``, ``FileNotFoundError`` without
    ``mpiexec``, ``RuntimeError`` when a job fails.  Writes ``<pcap_dir>/<suite>.pcap`` when
    ``pcap_dir`` is given.  Each row records what it ran with (``config``).
    """
    from ..launch import find_mpiexec

    config = config or ReviewConfig()
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise FileNotFoundError("no mpiexec found (pip install mpich)")
    rows = []
    for si, suite in enumerate(suites):
        settings = json.dumps(config.settings(suite))
        cap, frames = _captured_job(mpiexec, nranks, suite, count, si, timeout, settings)
        if pcap_dir is not None:
            Path(pcap_dir).mkdir(parents=True, exist_ok=True)
            cap.write_pcap(Path(pcap_dir) / f"{suite}.pcap")
        row = _row(suite, cap, frames, [gradients(r, count, 100 + si) for r in range(nranks)])
        rows.append({**row, "config": config.record(suite)})
    return rows


def _captured_job(
    mpiexec: str, nranks: int, suite: str, count: int, salt: int, timeout: float, settings: str
):
    """Run one capture job under a :class:`LoopbackCapture`; ``(capture, frames the ranks sent)``."""
    import shutil

    from ..launch import LAUNCHER_VARS, fresh_secret_file, identity_envs, mpmd, python_argv

    per_rank, pki = identity_envs(nranks) if json.loads(settings).get("identity") == "x509" else (None, None)
    secret = fresh_secret_file()  # /dev/shm where there is one; removed below, also on signals
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    with tempfile.TemporaryDirectory(prefix="seccomm-capture-") as tmp:
        env.update(TCP_ENV, SECCOMM_PSK_FILE=secret, SECCOMM_CAPTURE_FRAMES=tmp)
        try:
            with LoopbackCapture() as cap:
                argv = [*python_argv("seccomm.compliance.capture"), suite, str(count), str(salt), settings]
                out = subprocess.run(
                    mpmd(mpiexec, nranks, argv, per_rank),
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                )
        finally:
            os.unlink(secret)
            if pki:
                shutil.rmtree(pki, ignore_errors=True)
        if out.returncode != 0:
            raise RuntimeError(f"capture job for {suite} failed: {out.stderr.strip()[-400:]}")
        frames = []
        for r in range(nranks):
            with np.load(Path(tmp) / f"rank{r}.npz") as z:
                frames += np.split(z["data"], np.cumsum(z["lens"])[:-1])
    return cap, frames


def _row(suite: str, cap: LoopbackCapture, frames: list, inputs: list) -> dict:
    """The verdict for one suite: plaintext windows found in the packets, and whether every frame
    sent was captured (``complete``)."""
    pkts = [np.frombuffer(p, np.uint8) for _, p in cap.packets]
    res = find_plaintext(pkts, inputs)
    found = frames_found(pkts, frames)
    expect = "absent" if suite in ENCRYPTING else "present"
    complete = bool(frames) and found == len(frames) and res["plaintext_windows"] > 0
    return {
        "suite": suite,
        "packets": len(pkts),
        "captured_bytes": res["recorded_bytes"],
        "frames": len(frames),
        "frames_found": found,
        "frame_bytes": int(sum(f.size for f in frames)),
        "hits": res["hits"],
        "expect": expect,
        "complete": complete,
        "ok": complete and (res["hits"] == 0) == (expect == "absent"),
    }


def capture_evidence(pcap_dir=None, log=print, config: ReviewConfig | None = None) -> dict:
    """The packet-capture evidence for the compliance report: ``{"rows": [...], "nranks": 2,
    "pcap_dir": ...}`` from :func:`capture_check` on 2 ranks and every suite under ``config``,
    or ``{"rows": None, "reason": ...}`` where no packet socket may be opened here or the
    capture failed.  ``log(line)`` is called once before the capture starts."""
    try:
        LoopbackCapture().sock.close()
    except (PermissionError, OSError, AttributeError) as e:
        return {
            "rows": None,
            "reason": f"no packet socket on this machine ({type(e).__name__}: "
            f"needs Linux and root or CAP_NET_RAW)",
        }
    log("# packet capture on loopback: 2 ranks over TCP, 4 suites")
    try:
        rows = capture_check(pcap_dir=pcap_dir, config=config)
    except (RuntimeError, FileNotFoundError, OSError, ValueError) as e:
        return {"rows": None, "reason": f"capture failed: {e}"}
    return {"rows": rows, "nranks": 2, "pcap_dir": pcap_dir}


def _capture_job(suite: str, count: int, salt: int, settings: dict) -> None:
    """One rank of :func:`capture_check` (``python -m seccomm.compliance.capture SUITE COUNT SALT
    SETTINGS_JSON``): saves the frames it sent to ``$SECCOMM_CAPTURE_FRAMES/rank<r>.npz``."""
    from mpi4py import MPI

    from ..comm import SecureComm

    comm = MPI.COMM_WORLD
    x = gradients(comm.rank, count, 100 + salt)
    sc = SecureComm(comm, suite, algorithm="ring", timeout=60, wrap_transport=RecordingTransport, **settings)
    y = np.empty_like(x)
    sc.allreduce(x, y)
    g = np.empty(count * comm.size, np.float32)
    sc.allgather(x, g)
    frames = [f for kind, _, f in sc.transport.frames if kind == "frame"]
    sc.close()
    np.savez(
        os.path.join(os.environ["SECCOMM_CAPTURE_FRAMES"], f"rank{comm.rank}.npz"),
        data=np.concatenate(frames) if frames else np.empty(0, np.uint8),
        lens=np.array([f.size for f in frames], np.int64),
    )


if __name__ == "__main__":
    _capture_job(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4]))
