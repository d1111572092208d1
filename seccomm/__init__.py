"""seccomm: encrypted and authenticated collectives for distributed training, and what they cost.

``import seccomm`` needs neither a GPU, CuPy nor torch; mpi4py is imported when a
:class:`SecureComm` is built.
"""

from .errors import (
    ArgumentMismatchError,
    AuthenticationError,
    CommClosedError,
    ConcurrentUseError,
    ConfigMismatchError,
    FrameError,
    KeyScheduleError,
    PeerAbortError,
    SecCommError,
    TransportTimeout,
)
from .suites import SUITES, CipherSuite, get_suite

__version__ = "0.1.0"


def __getattr__(name):  # SecureComm pulls in mpi4py; load it on first use
    if name == "SecureComm":
        from .comm import SecureComm

        return SecureComm
    raise AttributeError(f"module 'seccomm' has no attribute {name!r}")


__all__ = [
    "SecureComm",
    "SecCommError",
    "AuthenticationError",
    "FrameError",
    "TransportTimeout",
    "ConfigMismatchError",
    "KeyScheduleError",
    "CommClosedError",
    "ConcurrentUseError",
    "ArgumentMismatchError",
    "PeerAbortError",
    "CipherSuite",
    "SUITES",
    "get_suite",
    "__version__",
]
