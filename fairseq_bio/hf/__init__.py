"""HF transformers <-> fairseq_bio: import HF BERT/RoBERTa/ELECTRA/DistilBERT/MegatronBERT encoders
as ``bio_roberta`` checkpoints and HF ELECTRA pairs (discriminator + generator) as ``bio_electra``
checkpoints, and export ``bio_roberta`` checkpoints (masked LM, tagging, sentence and QA heads) as
HF model directories and ``bio_electra`` ones as HF ELECTRA pairs, each checked for exactness (token
ids, hidden states, logits) before its output appears.

Modules, from the bottom up: ``common`` (HFConvertError, JSON files), ``config`` (config.json <->
model options), ``tokenizers`` (fairseq vocabulary -> HF tokenizer files), ``vocab`` (HF tokenizer
files -> fairseq vocabulary), ``weights`` (parameter maps, both directions), ``electra`` (the
ELECTRA pair's configs and parameter maps), ``heads`` (what a checkpoint's head becomes),
``checkpoints`` (checkpoints written and read), ``verify`` (the exactness checks), ``model_card``,
``export`` and ``importing``. transformers is imported only where it is used.

The names below are this package's API, each imported from its module when first used: a module of
the package (the commands' ``common``) is imported without the others, which import torch and
fairseq.
"""

import importlib

# Each public name and the module that defines it.
_MODULES = {
    "CHECKPOINT_FILE": ".common",
    "CHECK_PAIRS": ".verify",
    "CHECK_SENTENCES": ".verify",
    "CRF_FILE": ".heads",
    "DEFAULT_TOLERANCE": ".common",
    "HFConvertError": ".common",
    "HFVocab": ".vocab",
    "IMPORT_INFO": ".importing",
    "STRUCTURAL_OPTIONS": "..encoder_checkpoints",
    "build_model": "..encoder_checkpoints",
    "compare_electra_with_hf": ".verify",
    "compare_with_hf": ".verify",
    "encoder_checkpoint": "..encoder_checkpoints",
    "encoder_checkpoint_cfg": "..encoder_checkpoints",
    "export_hf": ".export",
    "hydra_model_overrides": "..encoder_checkpoints",
    "import_electra_pair": ".importing",
    "import_hf": ".importing",
    "read_fastbpe_codes": ".tokenizers",
    "read_hf_vocab": ".vocab",
    "read_sentencepiece_model": ".tokenizers",
    "save_encoder_checkpoint": "..encoder_checkpoints",
    "write_hf_tokenizer": ".tokenizers",
    "write_vocab_files": ".vocab",
}

__all__ = sorted(_MODULES)


def __getattr__(name: str):
    """The public ``name``, imported from its module on first use (PEP 562)."""
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_MODULES[name], __name__), name)
