"""The job secret of a benchmark run (``seccomm bench``, ``seccomm train``, the pytest plugin).

Every rank uses the job secret it was given (``SECCOMM_PSK_FILE`` or ``SECCOMM_PSK``, read by
:func:`~seccomm.keys.load_secret`); run plainly, ``seccomm bench`` and ``train`` write a fresh
one for the ranks they start.  Under a launcher with no secret at all, a benchmark may instead use
a secret that rank 0 draws and broadcasts *in the clear* — anyone who sees the setup traffic can
then read and forge every frame, so it is for synthetic data only — and only when every rank opts
in with ``SECCOMM_INSECURE_BENCH_SECRET=1`` (:data:`INSECURE_ENV`); every rank then warns once on
standard error.  A secret that is set but unusable (missing file, bad mode, short, bad hex,
guessable) is an error, never replaced.

The ranks agree first (:func:`decide`, on every rank's :class:`LocalSecret` state and opt-in),
so they all take the same branch and fail together, with one message printed by one rank.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from ..errors import KeyScheduleError, SecCommError
from ..keys import load_secret, random_secret
from ..launch import FRESH_SECRET_ENV, FRESH_SOURCE

#: the one way to allow the benchmark-only secret broadcast in the clear (value ``1``)
INSECURE_ENV = "SECCOMM_INSECURE_BENCH_SECRET"
#: a rank's state: its secret loaded, no secret set, a secret set but unusable
OK, NONE, BAD = 2, 1, 0
CLEAR_SOURCE = "benchmark-only secret broadcast in the clear (SECCOMM_INSECURE_BENCH_SECRET=1)"
_SET_ONE = (
    "no job secret on any rank: set SECCOMM_PSK_FILE on every rank (a 0600 file: "
    "umask 077 && openssl rand -hex 32 > FILE)"
)
_CLEAR_OK = f"for synthetic data only, {INSECURE_ENV}=1 on every rank allows a secret broadcast in the clear"
#: no secret anywhere, for a command that makes one when run without a launcher (seccomm CMD)
NO_SECRET = f"{_SET_ONE}, or run without a launcher (it makes one); {_CLEAR_OK}"
#: the same for the pytest plugin, which makes none: the secret must come with the command line
PLUGIN_NO_SECRET = (
    f"{_SET_ONE} and start pytest with it, e.g. SECCOMM_PSK_FILE=FILE mpiexec -n 2 python -m pytest ...; "
    f"{_CLEAR_OK}"
)
#: the same for ``seccomm report``, whose evidence never runs on a secret broadcast in the clear
REPORT_NO_SECRET = (
    f"{_SET_ONE}, or run without a launcher (it makes one); a compliance report does not run on a "
    f"secret broadcast in the clear ({INSECURE_ENV} is not taken)"
)


class BenchSecretError(SecCommError):
    """The ranks have no usable common secret.  Raised on every rank; ``speaker`` is True on the
    one rank that should print the message (the others hold a shorter one)."""

    def __init__(self, msg: str, speaker: bool):
        self.speaker = speaker
        super().__init__(msg)


@dataclass(frozen=True)
class LocalSecret:
    """This rank's secret: ``state`` (:data:`OK`, :data:`NONE` or :data:`BAD`), the secret
    (``b""`` unless OK), and ``text``: its source (OK) or the library's error message (BAD)."""

    state: int
    secret: bytes = b""
    text: str = ""


def local_secret() -> LocalSecret:
    """This rank's job secret as :func:`~seccomm.keys.load_secret` finds it; its source says
    when the command that started the ranks made it (:func:`seccomm.launch.relaunch`)."""
    if not (os.environ.get("SECCOMM_PSK_FILE") or os.environ.get("SECCOMM_PSK")):
        return LocalSecret(NONE)
    try:
        secret, source = load_secret()
    except KeyScheduleError as e:
        return LocalSecret(BAD, text=str(e))
    return LocalSecret(OK, secret, FRESH_SOURCE if os.environ.get(FRESH_SECRET_ENV) == "1" else source)


def opted_in() -> bool:
    """Whether this rank allows the benchmark-only secret broadcast in the clear."""
    return os.environ.get(INSECURE_ENV) == "1"


def decide(
    rank: int, mine: LocalSecret, states: list[int], opt_ins: list[int], no_secret: str = NO_SECRET
) -> bool:
    """From every rank's state and opt-in (identical lists on every rank): False to use the
    ranks' own secrets, True to use a secret broadcast in the clear; raises
    :class:`BenchSecretError` on every rank otherwise (an unusable secret on some rank, a secret
    on some ranks only, or no secret and no opt-in on every rank: ``no_secret``, the message that
    fits the caller; :data:`REPORT_NO_SECRET` also refuses the opt-in)."""
    bad = [r for r, s in enumerate(states) if s == BAD]
    if bad:
        first = bad[0]
        text = mine.text if rank == first else f"rank {first} has an unusable job secret"
        raise BenchSecretError(f"rank {first}: {text}" if rank == first else text, rank == first)
    missing = [r for r, s in enumerate(states) if s == NONE]
    if not missing:
        return False
    if len(missing) < len(states):
        raise BenchSecretError(
            f"rank(s) {missing[:8]} have no job secret while the others have one: set the same "
            "SECCOMM_PSK_FILE or SECCOMM_PSK on every rank",
            rank == 0,
        )
    lacking = [r for r, o in enumerate(opt_ins) if not o]
    if no_secret == REPORT_NO_SECRET or len(lacking) == len(opt_ins):
        raise BenchSecretError(no_secret, rank == 0)
    if lacking:
        raise BenchSecretError(
            f"no job secret on any rank, and rank(s) {lacking[:8]} lack {INSECURE_ENV}=1 that the "
            "others set: the secret broadcast in the clear needs every rank's opt-in; "
            f"set it on every rank, or set SECCOMM_PSK_FILE on every rank",
            rank == 0,
        )
    return True


_warned = False


def warn_clear_secret(rank: int) -> None:
    """Say on standard error, once per process, that this rank uses the clear-text secret."""
    global _warned
    if not _warned:
        _warned = True
        sys.stderr.write(  # one write per line: ranks share the terminal
            f"seccomm: WARNING: rank {rank} uses a benchmark-only job secret that rank 0 broadcast "
            f"in the clear ({INSECURE_ENV}=1): anyone who saw the setup traffic can read and forge "
            "every frame of this run; synthetic data only\n"
        )
        sys.stderr.flush()


def bench_secret(comm, no_secret: str = NO_SECRET) -> tuple[bytes, str]:
    """(secret, where it came from) on every rank of the ``mpi4py`` communicator ``comm``
    (collective): the job secret, or with every rank's opt-in and none set, a secret rank 0
    draws and broadcasts in the clear.  Raises :class:`BenchSecretError` on every rank when
    there is no usable common secret (``no_secret``: see :func:`decide`)."""
    import numpy as np

    mine = local_secret()
    flags = np.empty((comm.Get_size(), 2), np.int32)
    comm.Allgather(np.array([mine.state, opted_in()], np.int32), flags)
    rank = comm.Get_rank()
    if not decide(rank, mine, flags[:, 0].tolist(), flags[:, 1].tolist(), no_secret):
        return mine.secret, mine.text
    buf = np.frombuffer(random_secret(), np.uint8).copy()
    comm.Bcast(buf, root=0)
    warn_clear_secret(rank)
    return buf.tobytes(), CLEAR_SOURCE


def ranks_secret(prog: str, no_secret: str = NO_SECRET) -> bytes | None:
    """The job secret on every rank of ``MPI.COMM_WORLD`` (:func:`bench_secret`; collective: call
    it before any other traffic), or None on every rank after the rank that knows why printed
    ``PROG: error: ...`` once (the command then exits with status 2)."""
    from mpi4py import MPI

    try:
        return bench_secret(MPI.COMM_WORLD, no_secret)[0]
    except BenchSecretError as e:
        if e.speaker:
            print(f"{prog}: error: {e}", file=sys.stderr, flush=True)
        return None


_NO_FILES_FIX = "or run without a launcher (a throw-away CA is made)"


def identity_missing(comm, flag: str = "--identity x509", fix: str = _NO_FILES_FIX) -> str | None:
    """Collective: the error (the same on every rank) when some rank of ``comm`` lacks one of
    ``SECCOMM_CERT_FILE``, ``SECCOMM_KEY_FILE``, ``SECCOMM_CA_FILE``, else None; ``fix``: how to
    go without files, said last.  The files themselves are checked by each rank's
    ``SecureComm``."""
    from ..identity import CA_VAR, CERT_VAR, KEY_VAR

    missing = comm.allgather([v for v in (CERT_VAR, KEY_VAR, CA_VAR) if not os.environ.get(v)])
    bad = [r for r, m in enumerate(missing) if m]
    if not bad:
        return None
    return (
        f"{flag}: rank {bad[0]} has no {', '.join(missing[bad[0]])}: set them on every rank "
        f"(seccomm identity makes a test CA), {fix}"
    )
