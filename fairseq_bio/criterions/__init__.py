"""Registered criterions (pretraining uses fairseq's own ``masked_lm``)."""
