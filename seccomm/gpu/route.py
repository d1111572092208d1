"""Where a call's buffers run: the CPU engine, the device engine, or staged through host memory.

:class:`Devices` is a ``SecureComm``'s one seam into :mod:`seccomm.gpu`: it decides per call,
keeps the device engine's context per backend, and makes the device engine's runs.  Importing it
needs neither CuPy nor a GPU (everything device-side is imported on first use)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np


class Devices:
    """The device routing of one communicator.  ``backend``: the array module and batch AEAD
    of the device engine given by the user (``SecureComm(device_backend=...)``), or ``None``:
    then CuPy arrays and torch CUDA tensors run on the device engine with seccomm's kernels
    when CuPy finds a device and the suite and dtype have kernels (``auto``: the
    :class:`~seccomm.gpu.engine.CupyBackend` found on the first such call, or ``None``), and
    any other device buffers are staged (:mod:`seccomm.gpu.staging`)."""

    def __init__(self, backend=None):
        self.backend, self.auto = backend, None
        self._ctx: dict = {}  # backend id -> OpContext of the device engine

    def route(self, sc, a, b) -> tuple:
        """``("host" | "device" | "staged", a, b)`` for a call of ``sc`` on ``a`` and ``b``,
        decided on every call: with a backend given, the device engine; numpy buffers, the CPU
        engine; device buffers the GPU kernels can take (both on the device), the device engine
        with seccomm's kernels (torch CUDA tensors as CuPy views through DLPack); any other mix
        of device buffers, staged."""
        if self.backend is not None:
            return "device", a, b
        if type(a) is np.ndarray and type(b) is np.ndarray:
            return "host", a, b
        from .staging import is_device

        da, db = is_device(a), is_device(b)
        if not (da or db):
            return "host", a, b
        if not (da and db):  # one buffer on the host: the staged path writes it in place
            return "staged", a, b
        from .engine import device_ready

        if self.auto is None:
            self.auto = device_ready(sc, a, b)
        elif device_ready(sc, a, b, probe=False) is None:
            return "staged", a, b
        if self.auto is None:
            return "staged", a, b
        from .staging import as_cupy

        ca = as_cupy(a)
        return "device", ca, (ca if b is a else as_cupy(b))

    def op_run(self, host_ctx, frame, itemsize: int, collective: str):  # pragma: no mutate block (GPU)
        """The device engine's run (:class:`~seccomm.gpu.engine.DeviceOpRun`) of one call: the
        host context ``host_ctx`` with a device workspace of the backend in use (one per
        backend, kept across calls)."""
        from .engine import DeviceOpRun, DeviceWorkspace

        backend = self.backend or self.auto
        ctx = self._ctx.get(id(backend))
        if ctx is None:
            ctx = self._ctx[id(backend)] = replace(host_ctx, workspace=DeviceWorkspace(backend))
        return DeviceOpRun(ctx, frame, itemsize, collective)

    @staticmethod
    def staged(fn, sendbuf, recvbuf, **kw) -> None:  # pragma: no mutate block (GPU: tests/gpu/test_gpu.py)
        """Run ``fn(send, recv, **kw)`` on host copies of device buffers
        (:func:`seccomm.gpu.staging.staged_call`)."""
        from .staging import staged_call

        staged_call(fn, sendbuf, recvbuf, **kw)

    def clear(self) -> None:
        """Drop the device contexts (their workspaces)."""
        self._ctx = {}
