"""Registered optimizers."""

from . import bio_adamw  # noqa: F401
