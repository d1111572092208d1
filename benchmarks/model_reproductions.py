"""Reproduce two published observations with the cost model, from their own parameters
(recorded in docs/model.md):

1. CryptMPI (Naser et al., arXiv 2010.06471), ping-pong on 100 Gb/s InfiniBand: unencrypted
   10.6 GB/s at 1 MB and 11.2 GB/s at 4 MB; CryptMPI 7.5 GB/s (70 %) and 9.9 GB/s (88 %), with
   AES-GCM at ~5.5 GB/s per thread, multithreaded and pipelined.
2. GPU TEEs for data-parallel training (Lee et al., arXiv 2501.11771): every ring hop encrypts,
   MACs, decrypts and verifies without pipelining; the cost grows linearly with the GPU count.

    python benchmarks/model_reproductions.py
"""

from seccomm import costmodel as m

MB = 1_000_000


def cryptmpi():
    # link from the unencrypted points: S/(alpha + S beta) = 10.6 GB/s at 1 MB, 11.2 GB/s at 4 MB
    b = (4 * MB / 11.2e9 - 1 * MB / 10.6e9) / (3 * MB)
    a = 1 * MB / 10.6e9 - 1 * MB * b
    link = m.Link(a, b)
    print(
        f"# CryptMPI ping-pong: link alpha {a * 1e6:.2f} us, beta {1 / b / 1e9:.2f} GB/s (fitted to the "
        f"unencrypted points); AES-GCM 5.5 GB/s per thread"
    )
    print(f"# {'threads':>7} {'chunk':>8} {'1 MB ratio':>11} {'4 MB ratio':>11}   (published: 0.70, 0.88)")
    for threads in (1, 2, 4, 8):
        for chunk in (64 * 1024, 128 * 1024, 256 * 1024):
            r = []
            for s in (1 * MB, 4 * MB):
                tp, ts = m.pingpong(s, link, 1 / 5.5e9, 1 / 5.5e9, threads, chunk)
                r.append(tp / ts)
            print(f"  {threads:>7} {chunk:>8} {r[0]:11.2f} {r[1]:11.2f}")


def gpu_tee():
    # 4..64 GPUs, one ring allreduce of a 100 MB bucket, NVLink-class link; each hop pays a fixed
    # per-chunk crypto cost (bounce-buffer staging, launch, sync) plus a rate, unpipelined
    prm = m.Params(
        m.Link(5e-6, 1 / 150e9),
        m.Link(5e-6, 1 / 150e9),
        1 / 1000e9,
        1 / 20e9,
        1 / 20e9,
        1,
        1 << 40,
        {},
        False,
        200e-6,
    )
    print("# GPU-TEE ring, unpipelined, 100 MB: secure - plain time grows linearly with GPUs")
    print(f"# {'GPUs':>5} {'plain [ms]':>11} {'secure [ms]':>12} {'added [ms]':>11} {'ratio':>7}")
    for p in (2, 4, 8, 16, 32, 64):
        topo = m.Topology(1, p)
        tp = m.predict("allreduce", "ring", 100 * MB, prm, topo, False)
        ts = m.predict("allreduce", "ring", 100 * MB, prm, topo, True)
        print(f"  {p:>5} {tp * 1e3:11.2f} {ts * 1e3:12.2f} {(ts - tp) * 1e3:11.2f} {ts / tp:7.2f}")


if __name__ == "__main__":
    cryptmpi()
    print()
    gpu_tee()
