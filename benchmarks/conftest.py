"""Parameterise the benchmark suites from the seccomm plugin's options (--seccomm-sizes,
--seccomm-suites, ...): ``nbytes``, ``suite``, and ``crypto_suite`` (the suites of
--seccomm-suites that have a raw ``cryptography`` baseline, i.e. all but ``none``)."""

from seccomm.pytest_plugin import sizes_option, suites_option
from seccomm.suites import get_suite


def pytest_generate_tests(metafunc):
    if "nbytes" in metafunc.fixturenames:
        metafunc.parametrize("nbytes", sizes_option(metafunc.config))
    if "suite" in metafunc.fixturenames:
        metafunc.parametrize("suite", suites_option(metafunc.config))
    if "crypto_suite" in metafunc.fixturenames:
        names = [s for s in suites_option(metafunc.config) if get_suite(s).aead_class is not None]
        metafunc.parametrize("crypto_suite", names)
