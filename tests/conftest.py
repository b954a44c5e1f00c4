"""Suite-wide options.

`--nightly` runs the generated-program fuzz and the property tests at nightly size (the sizes below,
unless the environment already sets them); CI runs the default, small, derandomized sizes.
"""

import os

NIGHTLY_SIZES = {
    "ACCUMCHECK_FUZZ_EXAMPLES": "5000",  # tests/robustness: generated programs (and a fifth as many notebooks)
    "ACCUMCHECK_PROPERTY_EXAMPLES": "200",  # tests/verifier, tests/verifier_loop: random splits and models
}


def pytest_addoption(parser):
    parser.addoption("--nightly", action="store_true",
                     help="run fuzz and property tests at nightly size: " +
                          ", ".join(f"{name}={size}" for name, size in NIGHTLY_SIZES.items()))


def pytest_configure(config):
    # Before collection: the test modules read these sizes when they are imported.
    if config.getoption("--nightly"):
        for name, size in NIGHTLY_SIZES.items():
            os.environ.setdefault(name, size)
