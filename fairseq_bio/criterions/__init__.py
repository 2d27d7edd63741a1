"""Registered criterions (``bio_masked_lm``: fairseq's ``masked_lm`` loss with the LM head
fused)."""

from . import (  # noqa: F401
    bio_distillation,
    bio_electra,
    bio_extractive_qa,
    bio_masked_lm,
    bio_sentence_prediction,
    bio_tagging,
)
