"""HF transformers <-> fairseq_bio: import HF BERT/RoBERTa/ELECTRA/DistilBERT/MegatronBERT encoders as ``bio_roberta``
checkpoints and HF ELECTRA pairs (discriminator + generator) as ``bio_electra`` checkpoints, and export
``bio_roberta`` checkpoints (masked LM, tagging, sentence and QA heads) as HF model directories and ``bio_electra``
ones as HF ELECTRA pairs, each checked for exactness (token ids, hidden states, logits) before its output appears.

Modules, from the bottom up: ``common`` (HFConvertError, JSON files), ``config`` (config.json <-> model
options), ``tokenizers`` (fairseq vocabulary -> HF tokenizer files), ``vocab`` (HF tokenizer files -> fairseq
vocabulary), ``weights`` (parameter maps, both directions), ``electra`` (the ELECTRA pair's configs and parameter
maps), ``heads`` (what a checkpoint's head becomes), ``checkpoints`` (checkpoints written and read), ``verify`` (the
exactness checks), ``model_card``, ``export`` and ``importing``. transformers is imported only where it is used.
"""

from ..encoder_checkpoints import (
    STRUCTURAL_OPTIONS,
    build_model,
    encoder_checkpoint,
    encoder_checkpoint_cfg,
    hydra_model_overrides,
    save_encoder_checkpoint,
)
from .common import HFConvertError
from .export import export_hf
from .heads import CRF_FILE
from .importing import CHECKPOINT_FILE, IMPORT_INFO, import_electra_pair, import_hf
from .tokenizers import read_fastbpe_codes, read_sentencepiece_model, write_hf_tokenizer
from .verify import CHECK_PAIRS, CHECK_SENTENCES, DEFAULT_TOLERANCE, compare_electra_with_hf, compare_with_hf
from .vocab import HFVocab, read_hf_vocab, write_vocab_files

__all__ = [
    "CHECKPOINT_FILE",
    "CHECK_PAIRS",
    "CHECK_SENTENCES",
    "CRF_FILE",
    "DEFAULT_TOLERANCE",
    "HFConvertError",
    "HFVocab",
    "IMPORT_INFO",
    "STRUCTURAL_OPTIONS",
    "build_model",
    "compare_electra_with_hf",
    "compare_with_hf",
    "encoder_checkpoint",
    "encoder_checkpoint_cfg",
    "export_hf",
    "hydra_model_overrides",
    "import_electra_pair",
    "import_hf",
    "read_fastbpe_codes",
    "read_hf_vocab",
    "read_sentencepiece_model",
    "save_encoder_checkpoint",
    "write_hf_tokenizer",
    "write_vocab_files",
]
