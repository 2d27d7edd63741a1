"""pytest plugin for fairseq's own tests (``../shared/peer/fairseq_tests``, ``make peer-test``):
imports fairseq_bio before any test module, as ``--user-dir fairseq_bio`` does for a fairseq
command, and marks the fairseq test bugs that exist without us as expected failures (``--runxfail``
reports them as plain results)."""

import pytest

import fairseq_bio  # noqa: F401  (registration and fairseq_bio.patches.install(): the point of this plugin)

_RESUME_FLAKE = (
    "fairseq test bug (flaky): a resumed run ends within 1.2e-7 of the uninterrupted one, bitwise the same without "
    "fairseq_bio (upstream's weights_only=False), and the test wants the 2-decimal rounded train_ppl/gnorm of both, "
    "on unseeded random data, equal within 1e-4: it fails whenever a value sits on a rounding edge"
)

# node id -> (exception it fails with, strict, cause). Strict: a listed test that passes fails the
# run; flaky ones are not strict. Any other exception from a listed test is still a failure.
EXPECTED_FAILURES = {
    "tests/test_reproducibility.py::TestReproducibility::test_reproducibility": (
        AssertionError,
        False,
        _RESUME_FLAKE,
    ),
    "tests/test_reproducibility.py::TestReproducibility::test_mid_epoch_reproducibility": (
        AssertionError,
        False,
        _RESUME_FLAKE,
    ),
}


def pytest_collection_modifyitems(config, items):
    """Mark the listed tests ``xfail(raises=<their exception>, strict=..., reason=<cause>)``."""
    for item in items:
        if item.nodeid in EXPECTED_FAILURES:
            raises, strict, reason = EXPECTED_FAILURES[item.nodeid]
            item.add_marker(pytest.mark.xfail(raises=raises, strict=strict, reason=reason))
