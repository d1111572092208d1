"""Wire evidence: record every buffer a rank hands to the transport and scan it for plaintext.

:class:`RecordingTransport` keeps a private copy of every buffer passed to ``isend`` (frames) and
to the setup collectives (handshake).  :func:`find_plaintext` looks for every 16-byte window of
the plaintext (every offset) in every 16-byte window of the recording (every offset), so a
payload sent in the clear is found wherever it lands in a frame.  :func:`wire_check` runs the
four collectives on random float32 gradients under each suite on real ranks and reports, per
suite, how many plaintext windows crossed the wire: none for ``aes-256-gcm`` and
``chacha20-poly1305``; many for ``aes-256-gmac`` (integrity only) and ``none``, which is what
shows the check can fail.
"""

from __future__ import annotations

import numpy as np

from .transport import TransportWrapper

WINDOW = 16  #: bytes; a 16-byte window of random float32 data does not occur by chance (2**-128)
ENCRYPTING = ("aes-256-gcm", "chacha20-poly1305")
CHECK_SUITES = ("aes-256-gcm", "chacha20-poly1305", "aes-256-gmac", "none")


class RecordingTransport(TransportWrapper):
    """Records a copy of every buffer handed to the transport: ``frames`` is a list of
    ``(kind, peer, uint8 array)`` with kind ``"frame"`` (isend) or the setup collective's name."""

    def __init__(self, inner):
        super().__init__(inner)
        self.frames: list[tuple[str, object, np.ndarray]] = []

    def _keep(self, kind, peer, buf):
        self.frames.append((kind, peer, np.frombuffer(buf, np.uint8).copy()))

    def isend(self, buf, peer):
        self._keep("frame", peer, buf)
        return self.inner.isend(buf, peer)

    def allgather(self, sendbuf, recvbuf, what, timeout=None):
        self._keep("allgather", "all", sendbuf)
        return self.inner.allgather(sendbuf, recvbuf, what, timeout)

    def bcast(self, buf, root, what, timeout=None):
        if self.rank == root:
            self._keep("bcast", "all", buf)
        return self.inner.bcast(buf, root, what, timeout)

    def scatter(self, sendbuf, recvbuf, root, what, timeout=None):
        if self.rank == root:
            self._keep("scatter", "all", sendbuf)
        return self.inner.scatter(sendbuf, recvbuf, root, what, timeout)

    def wire_bytes(self) -> int:
        return sum(f.size for _, _, f in self.frames)


def _halves(buf: np.ndarray, window: int = WINDOW):
    """The first and last 8 bytes of every ``window``-byte window of ``buf`` (every offset), as
    two uint64 arrays: unaligned strided views, no copy."""
    n = max(buf.size - window + 1, 0)
    buf = np.ascontiguousarray(buf)
    if n == 0:
        return np.empty(0, np.uint64), np.empty(0, np.uint64)
    return np.ndarray((n,), "<u8", buf, 0, (1,)), np.ndarray((n,), "<u8", buf, window - 8, (1,))


def _keys(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return lo * np.uint64(0x9E3779B97F4A7C15) ^ hi


def find_plaintext(recorded: list[np.ndarray], plaintexts: list[np.ndarray], window: int = WINDOW) -> dict:
    """Count the ``window``-byte windows of ``recorded`` buffers (uint8, every offset) that are
    equal to some window of ``plaintexts`` (any dtype, read as bytes, every offset).

    Candidates are found by 64-bit keys and each one is confirmed byte for byte, so a count is
    never a hash collision.  Returns ``hits`` (windows found), ``recorded_bytes``,
    ``plaintext_windows`` (windows searched for) and ``first_hit`` (offset into the recording, or
    -1).  Windows do not span two recorded buffers.
    """
    if window < 8 or window > 16:
        raise ValueError("window must be 8..16 bytes")
    pts = [np.ascontiguousarray(p).reshape(-1).view(np.uint8) for p in plaintexts]
    pts = [p for p in pts if p.size >= window]
    recs = [np.ascontiguousarray(r).reshape(-1).view(np.uint8) for r in recorded]
    out = {"hits": 0, "recorded_bytes": int(sum(r.size for r in recs)),
           "plaintext_windows": int(sum(p.size - window + 1 for p in pts)), "first_hit": -1}
    if not pts:
        return out
    halves = [_halves(p, window) for p in pts]
    lo_all = np.concatenate([h[0] for h in halves])
    hi_all = np.concatenate([h[1] for h in halves])
    keys = _keys(lo_all, hi_all)
    order = np.argsort(keys, kind="stable")
    skeys = keys[order]
    base = 0
    for r in recs:
        if r.size >= window:
            lo, hi = _halves(r, window)
            k = _keys(lo, hi)
            idx = np.searchsorted(skeys, k).clip(0, skeys.size - 1)
            cand = np.flatnonzero(skeys[idx] == k)
            if cand.size:
                src = order[idx[cand]]
                same = (lo_all[src] == lo[cand]) & (hi_all[src] == hi[cand])
                hits = cand[same]
                if hits.size and out["first_hit"] < 0:
                    out["first_hit"] = int(base + hits[0])
                out["hits"] += int(hits.size)
        base += r.size
    return out


def _gradients(rank: int, count: int, salt: int) -> np.ndarray:
    return np.random.default_rng([rank, count, salt]).standard_normal(count).astype(np.float32)


def wire_check(comm, suites=CHECK_SUITES, count: int = 1 << 15, psk: bytes | None = None,
               timeout: float = 30.0) -> list[dict]:
    """Collective over ``comm`` (an ``mpi4py`` communicator, >= 2 ranks): for each suite, run
    allreduce (ring and recursive doubling), reduce-scatter, allgather and bcast on random
    float32 gradients (``count`` elements per rank per call), record what this rank hands to the
    transport, and search it for every rank's inputs and every result.

    Returns, identical on every rank, one row per suite: ``suite``, ``wire_bytes`` (all ranks),
    ``plaintext_windows`` (searched for, per rank), ``hits`` (all ranks), ``expect``
    (``"absent"`` for encrypting suites, ``"present"`` otherwise) and ``ok``.
    """
    from mpi4py import MPI

    from .comm import SecureComm

    rank, size = comm.Get_rank(), comm.Get_size()
    psk = psk or bytes(range(32))
    rows = []
    for si, suite in enumerate(suites):
        holder = {}

        def wrap(t):
            holder["t"] = RecordingTransport(t)
            return holder["t"]

        inputs = {r: [_gradients(r, count, 10 * si + k) for k in range(5)] for r in range(size)}
        mine = inputs[rank]
        outs, recorded = [], []
        for alg in ("ring", "recursive_doubling"):
            sc = SecureComm(comm, suite, psk=psk, algorithm=alg, chunk_bytes=1 << 16, timeout=timeout,
                            wrap_transport=wrap)
            y = np.empty_like(mine[0])
            sc.allreduce(mine[0 if alg == "ring" else 1], y)
            outs.append(y)
            if alg == "ring":
                blocks = sc.block_counts(count)
                rs = np.empty(blocks[rank], np.float32)
                sc.reduce_scatter(mine[2], rs)
                ag = np.empty(count, np.float32)
                sc.allgather(mine[3][: sc.block_counts(count)[rank]], ag)
                bc = mine[4].copy()
                sc.bcast(bc, root=0)
                outs += [rs, ag, bc]
            recorded += [f for _, _, f in holder["t"].frames]
            sc.close()
        plaintexts = [x for r in range(size) for x in inputs[r]] + outs
        res = find_plaintext(recorded, plaintexts)
        tot = np.array([res["hits"], res["recorded_bytes"]], np.int64)
        comm.Allreduce(MPI.IN_PLACE, tot, MPI.SUM)
        expect = "absent" if suite in ENCRYPTING else "present"
        hits = int(tot[0])
        rows.append({"suite": suite, "wire_bytes": int(tot[1]), "plaintext_windows": res["plaintext_windows"],
                     "hits": hits, "expect": expect, "ok": (hits == 0) == (expect == "absent")})
    return rows


# -- packet capture on loopback (root or CAP_NET_RAW) ------------------------------------------

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


def capture_check(suites=CHECK_SUITES, nranks: int = 2, count: int = 1 << 16, pcap_dir=None,
                  timeout: float = 120.0) -> list[dict]:
    """Run ``nranks`` local ranks over TCP on loopback per suite (allreduce and allgather of
    random float32 gradients), capture every packet on ``lo``, and search the captured bytes for
    every rank's inputs.  ``captured_bytes`` must be at least ``frame_bytes`` (what the ranks
    handed to MPI), or the row is ``ok: False`` (an incomplete capture proves nothing).

    Raises ``PermissionError`` without root/``CAP_NET_RAW``, ``FileNotFoundError`` without
    ``mpiexec``.  Writes ``<pcap_dir>/<suite>.pcap`` when ``pcap_dir`` is given.
    """
    import os
    import subprocess
    import sys
    from pathlib import Path

    from .keys import new_secret_file
    from .launch import LAUNCHER_VARS, find_mpiexec

    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise FileNotFoundError("no mpiexec found (pip install mpich)")
    rows = []
    for si, suite in enumerate(suites):
        secret = new_secret_file()
        env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
        env.update(TCP_ENV, SECCOMM_PSK_FILE=secret)
        try:
            with LoopbackCapture() as cap:
                out = subprocess.run([mpiexec, "-n", str(nranks), sys.executable, "-m", "seccomm.evidence",
                                      suite, str(count), str(si)], env=env, capture_output=True, text=True,
                                     timeout=timeout)
        finally:
            os.unlink(secret)
        if out.returncode != 0:
            raise RuntimeError(f"capture job for {suite} failed: {out.stderr.strip()[-400:]}")
        frame_bytes = int(out.stdout.split("FRAME_BYTES")[-1].split()[0])
        pkts = [np.frombuffer(p, np.uint8) for _, p in cap.packets]
        inputs = [_gradients(r, count, 100 + si) for r in range(nranks)]
        res = find_plaintext(pkts, inputs)
        if pcap_dir is not None:
            Path(pcap_dir).mkdir(parents=True, exist_ok=True)
            cap.write_pcap(Path(pcap_dir) / f"{suite}.pcap")
        expect = "absent" if suite in ENCRYPTING else "present"
        complete = res["recorded_bytes"] >= frame_bytes
        rows.append({"suite": suite, "packets": len(pkts), "captured_bytes": res["recorded_bytes"],
                     "frame_bytes": frame_bytes, "hits": res["hits"], "expect": expect,
                     "complete": complete, "ok": complete and (res["hits"] == 0) == (expect == "absent")})
    return rows


def _capture_job(suite: str, count: int, salt: int) -> None:
    """One rank of :func:`capture_check` (``python -m seccomm.evidence SUITE COUNT SALT``)."""
    from mpi4py import MPI

    from .comm import SecureComm

    comm = MPI.COMM_WORLD
    holder = {}

    def wrap(t):
        holder["t"] = RecordingTransport(t)
        return holder["t"]

    x = _gradients(comm.rank, count, 100 + salt)
    sc = SecureComm(comm, suite, algorithm="ring", chunk_bytes=1 << 16, timeout=60, wrap_transport=wrap)
    y = np.empty_like(x)
    sc.allreduce(x, y)
    g = np.empty(count * comm.size, np.float32)
    sc.allgather(x, g)
    sent = holder["t"].wire_bytes()
    sc.close()
    total = comm.allreduce(sent)
    if comm.rank == 0:
        print(f"FRAME_BYTES {total}", flush=True)


if __name__ == "__main__":
    import sys

    _capture_job(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
