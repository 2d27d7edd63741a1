"""Registered tasks."""

from . import bio_masked_lm  # noqa: F401
