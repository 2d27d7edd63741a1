"""Registered tasks (``fine_tuning`` holds what the fine-tuning tasks share and registers
nothing)."""

from . import (
    bio_electra,
    bio_extractive_qa,
    bio_masked_lm,
    bio_sentence_prediction,
    bio_tagging,
)  # noqa: F401
