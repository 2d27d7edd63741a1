"""A fine-tuned checkpoint applied to new files (fairseq-bio-predict's library).

``loading`` (checkpoints, batches), ``tagging`` (CoNLL and raw text), ``sentences`` (sentence-level
tasks), ``qa`` (extractive QA) and ``predictions`` (reading a predictions file back for scoring).
"""
