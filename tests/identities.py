"""Per-rank X.509 identities for test worlds: a throw-away CA and one certificate per rank
(:func:`seccomm.identity.make_test_identities`), made once per world size in a private temporary
folder that is removed when the test process exits.  Each rank is its own host
(``rank<r>.seccomm.test``), as the thread worlds' ranks are by default."""

from __future__ import annotations

import atexit
import shutil
import tempfile

from seccomm.identity import IdentityFiles, make_test_identities

_MADE: dict = {}


def rank_identities(size: int, hosts: tuple | None = None, days: float = 1.0) -> list[IdentityFiles]:
    """One :class:`~seccomm.identity.IdentityFiles` per rank of a world of ``size`` (``hosts``:
    the name each rank's certificate gives; default one host per rank), all issued by one CA."""
    hosts = tuple(hosts or (f"rank{r}.seccomm.test" for r in range(size)))
    key = (hosts, days)
    if key not in _MADE:
        folder = tempfile.mkdtemp(prefix="seccomm-test-pki-")  # mode 0700
        atexit.register(shutil.rmtree, folder, True)
        pki = make_test_identities(folder, list(hosts), days=days)
        _MADE[key] = [
            IdentityFiles(str(c), str(k), str(pki.ca_file)) for c, k in zip(pki.cert_files, pki.key_files)
        ]
    return _MADE[key]
