"""Parameterise the benchmark suites from the seccomm plugin's options (--seccomm-sizes, ...)."""

from seccomm.pytest_plugin import sizes_option, suites_option


def pytest_generate_tests(metafunc):
    if "nbytes" in metafunc.fixturenames:
        metafunc.parametrize("nbytes", sizes_option(metafunc.config))
    if "suite" in metafunc.fixturenames:
        metafunc.parametrize("suite", suites_option(metafunc.config))
