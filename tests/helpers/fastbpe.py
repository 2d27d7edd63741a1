"""fastBPE, the optional extra: why a test that needs it skips."""

FASTBPE_MISSING = (
    "fastBPE is not installed (optional extra: `make fastbpe` builds it; CI's `make test` does)"
)
