"""Registered criterions (pretraining uses fairseq's own ``masked_lm``)."""

from . import bio_distillation, bio_electra, bio_extractive_qa, bio_sentence_prediction, bio_tagging  # noqa: F401
