"""A ``SecureComm``'s settings: :class:`Options`, read and checked once, before any traffic.

Every rank reads its own; the setup (:mod:`seccomm.handshake`) then checks that all ranks read
the same (:meth:`Options.settings` is what each rank's hello carries).  Reading never raises: a
bad value is returned as the error that this rank's hello reports in place of its settings, so
that every rank raises it together rather than leave the others waiting in the setup."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import numpy as np

from .collectives import Tuning, get_collective
from .errors import shown
from .framing import AAD_BYTES, MAX_RANKS
from .handshake import job_label, node_ids_digest
from .keys import IDENTITIES, KEY_EXCHANGES
from .policy import ENCRYPT_POLICIES
from .suites import SUITES, CipherSuite, get_suite

ALGORITHMS = ("auto", *get_collective("allreduce").algorithms)
DEFAULT_CHUNK_BYTES = 1 << 20
DEFAULT_SMALL_BYTES = Tuning.small_bytes  # auto: recursive doubling at or below this many bytes
DEFAULT_BCAST_CHAIN_BYTES = Tuning.bcast_chain_bytes  # bcast: chain above, binomial tree at or below
#: the setup's protocol version (frames keep version 1)
PROTOCOL = 4


def timeout_setting(timeout):
    """The timeout as given: ``timeout``, else ``SECCOMM_TIMEOUT``, else 60 (not yet a number)."""
    return timeout if timeout is not None else os.environ.get("SECCOMM_TIMEOUT", 60)


def read_timeout(timeout) -> float:
    """Seconds any single wait may block (:func:`timeout_setting` as a float); NaN where it is
    not a number (:meth:`Options.read` reports it)."""
    raw = timeout_setting(timeout)
    try:
        return float(raw)
    except (TypeError, ValueError):
        return float("nan")


def job_id_of(job_id) -> str:
    """The job label: ``job_id``, else ``SECCOMM_JOB_ID``, else ``SLURM_JOB_ID``, else empty."""
    if job_id is not None:
        return str(job_id)
    return os.environ.get("SECCOMM_JOB_ID", os.environ.get("SLURM_JOB_ID", ""))


@dataclass(frozen=True)
class Options:
    """One rank's checked settings (``SecureComm``'s parameters of the same names; units:
    bytes and seconds).  ``usage_limit``: frames one key may seal (``rotate_after_frames`` where
    given, else the suite's limit at ``chunk_bytes``: :meth:`~seccomm.suites.CipherSuite.usage_limit`);
    ``node_ids``: one int per rank, or ``None``."""

    suite: CipherSuite
    algorithm: str
    encrypt: str
    chunk_bytes: int
    key_exchange: str
    job_id: str
    timeout: float
    crypto_threads: int | None
    rotate_after_frames: int | None
    small_bytes: int
    bcast_chain_bytes: int
    node_ids: list | None
    identity: str = "psk"

    @property
    def limit_forced(self) -> bool:
        """Whether ``rotate_after_frames`` set the per-key limit."""
        return self.rotate_after_frames is not None

    @property
    def usage_limit(self) -> int:
        if self.limit_forced:
            return self.rotate_after_frames
        return self.suite.usage_limit(self.chunk_bytes, AAD_BYTES)

    @classmethod
    def read(cls, size: int, small_default: int, **kw) -> tuple[Options, Exception | None]:
        """The options of a rank of a world of ``size`` ranks from ``SecureComm``'s keyword
        arguments (``suite``, ``algorithm``, ``encrypt``, ``chunk_bytes``, ``key_exchange``,
        ``job_id``, ``timeout``, ``crypto_threads``, ``rotate_after_frames``, ``small_bytes``,
        ``bcast_chain_bytes``, ``node_ids``, ``identity``: ``"psk"`` or ``"x509"``), with the
        defaults filled in (``small_bytes``: ``small_default``, the transport's).  Returns
        ``(options, None)``, or where a value is bad ``(options under suite none, error)``: the
        ``ValueError`` or ``TypeError`` naming it and what is allowed."""
        small = kw["small_bytes"]
        opts = cls(
            suite=kw["suite"],
            algorithm=kw["algorithm"],
            encrypt=kw["encrypt"],
            chunk_bytes=kw["chunk_bytes"],
            key_exchange=kw["key_exchange"],
            job_id=job_id_of(kw["job_id"]),
            timeout=read_timeout(kw["timeout"]),
            crypto_threads=kw["crypto_threads"],
            rotate_after_frames=kw["rotate_after_frames"],
            small_bytes=small_default if small is None else small,
            bcast_chain_bytes=kw["bcast_chain_bytes"],
            node_ids=kw["node_ids"],
            identity=kw["identity"],
        )
        try:
            return opts._checked(size, kw["timeout"]), None
        except (ValueError, TypeError) as e:
            return replace(opts, suite=SUITES["none"], node_ids=None), e

    def _checked(self, size: int, timeout_raw) -> Options:
        suite = get_suite(self.suite)
        _check_choice("algorithm", self.algorithm, ALGORITHMS)
        _check_choice("encrypt", self.encrypt, ENCRYPT_POLICIES)
        _check_choice("key_exchange", self.key_exchange, KEY_EXCHANGES)
        _check_choice("identity", self.identity, IDENTITIES)
        _check_int("chunk_bytes", self.chunk_bytes, 16, (1 << 31) - 64)
        _check_int("small_bytes", self.small_bytes, 0, 1 << 62)
        _check_int("bcast_chain_bytes", self.bcast_chain_bytes, 0, 1 << 62)
        rotate = self.rotate_after_frames
        if rotate is not None:
            _check_int("rotate_after_frames", rotate, 1, 1 << 63)
            cap = suite.usage_limit(self.chunk_bytes, AAD_BYTES)
            if rotate > cap:
                raise ValueError(
                    f"rotate_after_frames {rotate} is above {suite.name}'s usage limit of {cap} "
                    f"frames per key at chunk_bytes={self.chunk_bytes} ({suite.limit_source}); it "
                    f"may only lower the rotation point"
                )
        if self.crypto_threads is not None:
            _check_int("crypto_threads", self.crypto_threads, 1, 1024)
        if not self.timeout > 0:
            given = shown(timeout_setting(timeout_raw))
            raise ValueError(f"timeout must be a number of seconds > 0, got {given}")
        if size > MAX_RANKS:
            raise ValueError(f"world size {size} exceeds {MAX_RANKS} (16-bit step field)")
        node_ids = self.node_ids
        if node_ids is not None:
            if isinstance(node_ids, (str, bytes)) or len(node_ids) != size:
                raise ValueError(f"node_ids must list one node id per rank ({size} entries)")
            node_ids = [_as_int("node_ids entry", x) for x in node_ids]
        return replace(self, suite=suite, node_ids=node_ids)

    def settings(self, size: int, error: Exception | None = None) -> dict:
        """What this rank's setup hello carries (:func:`seccomm.handshake.establish` compares
        them across ranks): the protocol version, and unless ``error`` (this rank's bad value,
        sent in their place) every setting that must match."""
        out = {"protocol": PROTOCOL}
        if error is None:
            out.update(
                identity=self.identity,
                suite=self.suite.name,
                algorithm=self.algorithm,
                encrypt=self.encrypt,
                chunk_bytes=int(self.chunk_bytes),
                key_exchange=self.key_exchange,
                job_id=job_label(self.job_id),
                world_size=size,
                usage_limit=int(self.usage_limit),
                small_bytes=int(self.small_bytes),
                bcast_chain_bytes=int(self.bcast_chain_bytes),
                node_ids=None if self.node_ids is None else node_ids_digest(self.node_ids),
            )
        return out


def _check_choice(what, value, allowed):
    if value not in allowed:
        raise ValueError(f"unknown {what} {shown(value)}; allowed: {', '.join(allowed)}")


def _check_int(what, value, lo, hi):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise ValueError(f"{what} must be an integer in [{lo}, {hi}], got {shown(value)}")


def _as_int(what, v):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ValueError(f"{what} must be an integer, got {shown(v)}")
    return int(v)
