"""The CUDA sources of seccomm's GPU AEAD kernels (``aead.cu``, ``sc_crypto.cuh``, ``host_shim.c``).

They live in the checkout's top-level ``kernels/`` folder and are installed as the package data
of ``seccomm.kernels`` (``[tool.setuptools.package-dir]`` in pyproject.toml), so editable and
regular installs ship them alike; :mod:`seccomm.gpu.kernels` compiles them at run time (NVRTC)."""
