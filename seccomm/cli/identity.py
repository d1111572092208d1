"""``seccomm identity``: make a test CA and one certificate per host, for ``identity="x509"``.

    seccomm identity --out DIR node-a.example node-b.example

writes ``DIR/ca.pem`` and, per name, ``DIR/host-<i>.pem`` (its certificate: the name as its DNS
name, or its SPIFFE ID where it starts with ``spiffe://``) and ``DIR/host-<i>.key`` (its private
key, mode 0600), with :func:`seccomm.identity.make_test_identities`, and prints the three
environment variables each host's ranks need.  The CA's private key is not kept: this is for a
first try and for tests; a real job's certificates come from its own CA.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from .usage import UsageError, check_dir, float_in

HELP = "Make a test CA and one certificate per host (identity x509), and print their settings."


def add_arguments(p) -> None:
    p.add_argument("--out", required=True, metavar="DIR", help="a new or empty folder (made 0700)")
    p.add_argument(
        "--days", type=float_in(0.0, 3650.0, lo_open=True), default=1.0, help="validity (default 1 day)"
    )
    p.add_argument("names", nargs="+", metavar="NAME", help="each host's name (DNS name or spiffe:// ID)")


def run(args, argv) -> int:
    from ..identity import CA_VAR, CERT_VAR, KEY_VAR, make_test_identities

    check_dir("--out", args.out)
    out = Path(args.out).absolute()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--out {str(out)!r} exists and is not an empty folder")
    names = list(args.names)
    bad = [n for n in names if not n or any(c.isspace() or c == "\0" for c in n)]
    if bad:
        raise UsageError(f"not a host name: {bad[0]!r}")
    out.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(out, 0o700)
    pki = make_test_identities(out, names, days=args.days)
    print(f"# a test CA and {len(names)} host certificate(s) in {out} (valid {args.days:g} day(s))")
    print("# each host needs ca.pem and its own certificate and key (the key 0600, the ranks' user's)")
    for name, cert, key in zip(names, pki.cert_files, pki.key_files):
        env = {CERT_VAR: cert, KEY_VAR: key, CA_VAR: pki.ca_file}
        print(f"# {name}:")
        print("export " + " ".join(f"{k}={shlex.quote(str(v))}" for k, v in env.items()))
    return 0
