"""Registered models and their architectures."""

from . import bio_roberta  # noqa: F401
