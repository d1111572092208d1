"""A regular (non-editable) install ships the CUDA sources: the wheel that ``pip install .`` builds
holds the checkout's ``kernels/`` as ``seccomm/kernels/``, and ``seccomm.gpu.kernels`` finds them
there, from any directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("seccomm/kernels/aead.cu", "seccomm/kernels/sc_crypto.cuh")  # (the checkout's kernels/)


def build_requirements_met() -> bool:
    """Whether this environment holds every requirement of ``[build-system]`` in pyproject.toml
    (then the wheel is built here, without fetching a build environment); a venv as
    ``python3 -m venv`` makes it (setuptools 65, no ``wheel``) does not, and pip builds in an
    isolated environment of its own, as ``pip install .`` does."""
    import re
    import tomllib
    from importlib import metadata

    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    for req in requires:
        name, op, want = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*(>=)?\s*([0-9.]*)", req).groups()
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            return False
        if op and _version(have) < _version(want):
            return False
    return True


def _version(text: str) -> tuple:
    return tuple(int(p) for p in text.split(".")[:3] if p.isdigit())


def test_build_requirements_are_checked_before_building_without_isolation(monkeypatch):
    """A venv made by ``python3 -m venv`` (setuptools 65.5, no wheel) is not taken for a build
    environment (``--no-build-isolation`` there fails: "invalid command 'bdist_wheel'")."""
    from importlib import metadata

    real = metadata.version
    fake = {"setuptools": "65.5.0", "wheel": None}

    def version(name):
        if name in fake:
            if fake[name] is None:
                raise metadata.PackageNotFoundError(name)
            return fake[name]
        return real(name)

    monkeypatch.setattr(metadata, "version", version)
    assert build_requirements_met() is False
    fake.update(setuptools="80.9.0", wheel="0.45.1")
    try:
        real("mpich")
    except metadata.PackageNotFoundError:
        return
    assert build_requirements_met() is True


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    src = tmp_path_factory.mktemp("src") / "seccomm"  # a clean copy: no stale build/ or egg-info
    shutil.copytree(
        ROOT,
        src,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"
        ),
    )
    isolation = ["--no-build-isolation"] if build_requirements_met() else []
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (whl,) = out.glob("seccomm-*.whl")
    return whl


@pytest.mark.slow
def test_wheel_ships_kernel_sources(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert set(SOURCES) <= names, sorted(n for n in names if "/kernels/" in n or "/gpu/" in n)


@pytest.mark.slow
def test_installed_tree_loads_kernel_sources(wheel, tmp_path):
    """Unpacked as pip installs it (no source tree anywhere on the path), run from another
    directory: module_source() reads the shipped sources and pastes the header in."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = (
        "import seccomm, seccomm.gpu.kernels as k; src = k.module_source(); "
        "print(seccomm.__file__); print(k.KERNELS_DIR); print(src.count('__global__')); "
        "print('#include \"sc_crypto.cuh\"' in src)"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SECCOMM_KERNELS_DIR")}
    env["PYTHONPATH"] = str(site)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    where, kdir, kernels, include_left = proc.stdout.split()
    assert Path(where).is_relative_to(site) and Path(kdir).is_relative_to(site)
    assert int(kernels) >= 3 and include_left == "False"
