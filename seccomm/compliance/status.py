"""What the compliance report may claim under FIPS 140-3, stated apart: the status of each
*algorithm* (approved or not: NIST SP 800-140C) and the status of the *module* that runs it.

FIPS 140-3 validates modules, not algorithms.  seccomm's CPU cryptography runs in the OpenSSL
that the ``cryptography`` package links; an approved algorithm is covered by FIPS 140-3 only
when it runs inside a validated module, such as a validated OpenSSL FIPS provider.
:func:`crypto_module` reads, at report time, whether OpenSSL runs with a FIPS provider
(``cryptography``'s ``is_fips_enabled``: OpenSSL's default properties ask for ``fips=yes``);
:func:`module_status` says what follows.  The report also states what no module covers: the
nonce is built by seccomm's Python code (:func:`nonce_location`), and the GPU path runs
seccomm's own kernels (:func:`gpu_path`).
"""

from __future__ import annotations


def fips_provider_active() -> bool | None:
    """Whether the OpenSSL behind ``cryptography`` runs with a FIPS provider (its default
    properties ask for ``fips=yes``); None when ``cryptography`` does not say."""
    try:
        from cryptography.hazmat.bindings._rust import openssl as rust_openssl

        return bool(rust_openssl.is_fips_enabled())
    except Exception:  # noqa: BLE001 - private API moved: try the backend, else say unknown
        try:
            from cryptography.hazmat.backends.openssl import backend

            return bool(backend._fips_enabled)
        except Exception:  # noqa: BLE001
            return None


def crypto_module() -> dict:
    """The module behind the CPU cryptography, read now: ``openssl`` (version text),
    ``cryptography`` (version) and ``fips_provider`` (:func:`fips_provider_active`)."""
    import cryptography
    from cryptography.hazmat.backends.openssl import backend

    return {
        "openssl": backend.openssl_version_text(),
        "cryptography": cryptography.__version__,
        "fips_provider": fips_provider_active(),
    }


def module_status(mod: dict) -> str:
    """The module status in words, from :func:`crypto_module`'s ``mod``."""
    where = f"{mod['openssl']} in the cryptography {mod['cryptography']} package"
    if mod.get("fips_provider") is True:
        return (
            f"a FIPS provider is active in {where}; whether that provider build is a validated "
            "module is not checked here: compare its version with its CMVP certificate"
        )
    if mod.get("fips_provider") is False:
        return f"not validated: {where}, no FIPS provider active"
    return f"unknown: the FIPS state of {where} could not be read"


def module_validated_claim(mod: dict) -> str:
    """The summary's short form: what may be claimed for an approved algorithm here."""
    if mod.get("fips_provider") is True:
        return "approved algorithm, FIPS provider active (validation: see its certificate)"
    if mod.get("fips_provider") is False:
        return "approved algorithm, module not validated"
    return "approved algorithm, module state unknown (the FIPS state could not be read)"


def suite_status(suite, mod: dict) -> str:
    """One suite's FIPS 140-3 status: its algorithm status (the registry's ``fips_140_3``) and
    the module status, e.g. ``approved algorithm (NIST SP 800-38D); module: not validated:
    OpenSSL 3.x in the cryptography 46 package, no FIPS provider active``."""
    if not suite.authenticated:
        return suite.fips_140_3
    return f"{suite.fips_140_3}; module: {module_status(mod)}"


#: the algorithms of the setup, with their algorithm status (the module is the same OpenSSL)
SETUP_ALGORITHMS = (
    (
        "HKDF-SHA256 (every key)",
        "HKDF-SHA256 (RFC 5869; the extract-then-expand KDF of NIST SP 800-56C Rev. 2), used here on a "
        "PSK (psk-dhe: a PSK and X25519 or group secrets), which is not a key-establishment scheme "
        "that SP 800-56C covers: approval of this use is not claimed",
    ),
    (
        "HMAC-SHA256 (hello, finished, argument-record, receipt and notice MACs)",
        "approved algorithm (FIPS 198-1)",
    ),
    ("SHA-256 (session salt, transcript hash)", "approved algorithm (FIPS 180-4)"),
    ("X25519 (psk-dhe shares)", "not approved (SP 800-56A Rev. 3 has no Curve25519 key agreement)"),
    (
        "AES-256-GCM (psk-dhe group-secret wrap)",
        "approved algorithm (NIST SP 800-38D); its constant IV is made outside any module (below)",
    ),
)


def nonce_location() -> str:
    """Where the AES-GCM nonces (IVs) are generated, and what FIPS 140-3 IG C.H says about it."""
    return (
        "Where the nonce is generated: in seccomm's own code, so it is generated outside any "
        "cryptographic module: FrameContext.fill (seccomm/framing.py) writes it into the frame's "
        "slot for the Python path and for the device engine's batches (whose kernels read it from "
        "there); the compiled two-rank swap (seccomm/pairswap/_pairswap.c) writes the op index into its "
        "slot's nonce per op; each hands it to OpenSSL's AES-GCM (or the GPU kernels) as an "
        "argument. The psk-dhe group-secret wrap (seccomm/handshake.py) seals with a constant "
        "all-zero 12-byte IV, under a key fresh per session and per receiving rank that seals once. "
        "FIPS 140-3 "
        "Implementation Guidance C.H requires the IV of AES-GCM to be generated inside the module's "
        "boundary, in one of the ways it lists. These constructions therefore do not meet IG C.H, "
        "whichever OpenSSL module runs the cipher; they do meet the uniqueness requirement of NIST "
        "SP 800-38D section 8 (below; the wrap: each key is used once)."
    )


def gpu_path() -> list[str]:
    """The GPU path and its own limits, as report items."""
    return [
        "Device buffers (CuPy arrays, torch CUDA tensors) are sealed and opened by seccomm's own "
        "CUDA kernels (kernels/aead.cu, sc_crypto.cuh): AES-256, GHASH, ChaCha20 and "
        "Poly1305 written for this project. They are not part of any cryptographic module and no "
        "validation covers them (algorithm or module); they are checked only against the CPU "
        "suites, RFC 8439 and NIST GCM vectors (tests/gpu/test_gpu_kernels_emulated.py, docs/gpu.md).",
        "Side channel: the AES rounds look up T-tables (4 x 1 KiB) and GHASH uses Shoup 4-bit "
        "tables (16 entries of 16 bytes for each multiplier), both in shared memory and indexed by "
        "data that depends on the key and the plaintext. Which banks a warp hits, and so its timing, "
        "depends on those secrets: a cache/bank-timing exposure wherever another process can time "
        "kernels on the same GPU (ranks of other jobs or tenants sharing a GPU, MPS, time slicing). "
        "Published attacks recover AES keys from such timing on GPUs (Jiang, Fei, Kaeli, HPCA 2016 "
        "and GLSVLSI 2017). The kernels are not constant time; see docs/threat-model.md.",
        "This report's evidence runs the CPU path only (host buffers through cryptography).",
    ]
