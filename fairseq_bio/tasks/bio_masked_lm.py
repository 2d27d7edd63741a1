"""bio_masked_lm: masked-LM pretraining with whole-word masking for any tokenizer and a masking-rate
schedule, working under both hydra and argparse (fairseq's own whole-word masking reads
``self.args``, which hydra never sets)."""

import logging
import os
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np
import torch
from fairseq import metrics, utils
from fairseq.data import (
    IdDataset,
    NestedDictionaryDataset,
    NumelDataset,
    NumSamplesDataset,
    PrependTokenDataset,
    RightPadDataset,
    SortDataset,
    TokenBlockDataset,
    data_utils,
)
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.tasks import register_task
from fairseq.tasks.language_modeling import SAMPLE_BREAK_MODE_CHOICES
from fairseq.tasks.masked_lm import MaskedLMTask
from omegaconf import II, MISSING

from ..data.batching import KeepsEveryExample
from ..data.chunked_dataset import ChunkedSentenceDataset
from ..data.dictionary import load_dictionary
from ..data.word_boundaries import WordBoundaries
from ..errors import BioConfigError, BioFileNotFoundError
from ..modules.masking import BUDGETS, DECISIONS, BatchMasker
from .fine_tuning import exempt_from_weight_decay

logger = logging.getLogger(__name__)


@dataclass
class BioMaskedLMConfig(FairseqDataclass):
    data: str = field(
        default=MISSING,
        metadata={
            "help": "colon-separated data dirs (shards), one per epoch in turn; the first holds valid"
        },
    )
    sample_break_mode: SAMPLE_BREAK_MODE_CHOICES = field(
        default="complete",
        metadata={
            "help": "none: fill blocks regardless of sentences; complete: whole sentences (RoBERTa's "
            "FULL-SENTENCES); complete_doc: whole sentences of one document; eos: one sentence per block. "
            "Sentences longer than a block are split, never dropped"
        },
    )
    tokens_per_sample: int = field(default=512, metadata={"help": "tokens per block, <s> included"})
    mask_prob: float = field(
        default=0.15, metadata={"help": "fraction of words (or tokens) to predict"}
    )
    mask_prob_schedule: str = field(
        default="",
        metadata={
            "help": "comma-separated masking rates used over equal consecutive parts of "
            "optimization.max_update, e.g. 0.05,0.1,0.15,0.2,0.25 (a rising rate, which PubMedBERT sec. 2.3 cites "
            "from other work; PubMedBERT itself used a constant 0.15); empty: mask_prob throughout"
        },
    )
    leave_unmasked_prob: float = field(
        default=0.1, metadata={"help": "fraction of chosen words left as they are"}
    )
    random_token_prob: float = field(
        default=0.1, metadata={"help": "fraction of chosen words replaced by random tokens"}
    )
    freq_weighted_replacement: bool = field(
        default=False,
        metadata={"help": "draw random replacements by corpus frequency (dict.txt counts)"},
    )
    mask_whole_words: bool = field(
        default=False,
        metadata={"help": "mask every token of a chosen word (word boundaries from bpe_json)"},
    )
    mask_budget: ChoiceEnum(BUDGETS) = field(
        default="words",
        metadata={
            "help": "words: mask_prob of each row's words (tokens without mask_whole_words), fairseq's "
            "MaskTokensDataset: with whole words a row predicts as many tokens as its drawn words have; tokens: "
            "max(1, round(mask_prob x the row's tokens)) predicted tokens, whole words taken in random order while "
            "they fit (BERT's create_pretraining_data.py, Megatron-LM's and ELECTRA's masking)"
        },
    )
    mask_decision: ChoiceEnum(DECISIONS) = field(
        default="word",
        metadata={
            "help": "with mask_whole_words, the mask/keep/random draw is taken once per chosen word (word: fairseq's) "
            "or for each of its tokens (token: BERT's and Megatron-LM's)"
        },
    )
    bpe_json: Optional[str] = field(
        default=None,
        metadata={
            "help": "JSON naming the fairseq BPE and its files, used for word boundaries (default: "
            "<first data dir>/bpe.json, written by fairseq-bio-vocab)"
        },
    )
    head_warmup_updates: int = field(
        default=0,
        metadata={
            "help": "continued pretraining of a model without an MLM head (MiniLM, sentence encoders: the import "
            "initialises one): for the first N updates only the head's own weights (dense, layer norm, output "
            "bias) learn, the encoder and the token embeddings (tied to the head's output) keep their imported "
            "values, so the new head's first, random gradients do not move them; 0: everything learns from the start"
        },
    )
    freeze_embeddings: bool = field(
        default=False,
        metadata={
            "help": "continued pretraining that keeps the token embeddings (and the MLM head's output weight tied to "
            "them) at their starting values for the whole run (no gradient, no optimizer state, no weight decay): "
            "every other weight learns"
        },
    )
    exempt_from_weight_decay: bool = field(
        default=False,
        metadata={
            "help": "no weight decay on biases and LayerNorm weights, as BERT's, ELECTRA's and Megatron-LM's "
            "pretraining code (fairseq's RoBERTa decays every weight); needs optimizer=bio_adamw with one fp32 "
            "master tensor per parameter (common.fp16_no_flatten_grads=true under fp16)"
        },
    )
    max_update: int = II("optimization.max_update")
    seed: int = II("common.seed")
    restore_file: str = II("checkpoint.restore_file")
    finetune_from_model: Optional[str] = II("checkpoint.finetune_from_model")
    save_dir: str = II("checkpoint.save_dir")


# the MLM head's own parameters; its tied output weight is the token embeddings'
HEAD_PREFIX = "encoder.lm_head."


@register_task("bio_masked_lm", dataclass=BioMaskedLMConfig)
class BioMaskedLMTask(MaskedLMTask):
    """Masked-LM task that masks each batch as it is used, so masking follows the update number and
    is reproducible from (seed, update, sample ids); targets are pad except at predicted positions,
    the format of fairseq's ``masked_lm`` criterion."""

    head_warmup_supported = True

    cfg: BioMaskedLMConfig

    def __init__(self, cfg: BioMaskedLMConfig, dictionary=None):
        super().__init__(cfg, dictionary)
        self.mask_prob_schedule = _parse_schedule(cfg.mask_prob_schedule)
        self._decay_checked = (
            False  # task.exempt_from_weight_decay: the optimizer is checked at the first update
        )
        self._dictionary_record = None  # get_checkpoint_dict's, made once
        if cfg.head_warmup_updates < 0 or (
            cfg.head_warmup_updates and not self.head_warmup_supported
        ):
            raise BioConfigError(
                f"task.head_warmup_updates={cfg.head_warmup_updates}: must be >= 0, and 0 for {cfg._name}"
            )
        if cfg.head_warmup_updates:
            logger.info(
                "MLM head warm-up: updates 0-%d train only %s* (encoder and token embeddings kept)",
                cfg.head_warmup_updates - 1,
                HEAD_PREFIX,
            )
        if self.mask_prob_schedule and cfg.max_update <= 0:
            raise BioConfigError(
                "task.mask_prob_schedule needs optimization.max_update > 0 to know its steps"
            )
        for rate in [cfg.mask_prob] + self.mask_prob_schedule:
            if not 0.0 < rate < 1.0:
                raise BioConfigError(f"masking rates must lie in (0, 1), got {rate}")
        boundaries = None
        if cfg.mask_whole_words:
            data_dir = utils.split_paths(cfg.data)[0]
            boundaries = WordBoundaries.from_data_dir(self.dictionary, data_dir, cfg.bpe_json)
        self.masker = BatchMasker(
            self.dictionary,
            self.mask_idx,
            leave_unmasked_prob=cfg.leave_unmasked_prob,
            random_token_prob=cfg.random_token_prob,
            freq_weighted_replacement=cfg.freq_weighted_replacement,
            word_boundaries=boundaries,
            budget=str(cfg.mask_budget),
            decision=str(cfg.mask_decision),
        )

    @classmethod
    def load_dict(cls, cfg):
        check_binarised(cfg.data)
        paths = utils.split_paths(cfg.data)
        dictionary = load_dictionary(
            os.path.join(paths[0], "dict.txt")
        )  # fairseq's load_dict, one-line errors
        logger.info("dictionary: %d types", len(dictionary))
        return dictionary

    def get_checkpoint_dict(self):
        """What fairseq adds to every checkpoint's ``extra_state``: the record of the dictionary
        (the first data directory's dict.txt and ``<mask>``), which a later run or command compares
        with its own (``checkpoint_fit``)."""
        from ..checkpoint_fit import RECORD, dictionary_record

        if self._dictionary_record is None:  # the dictionary is fixed once the task is set up
            dict_file = os.path.join(utils.split_paths(self.cfg.data)[0], "dict.txt")
            self._dictionary_record = dictionary_record(self.dictionary, dict_file)
        return {RECORD: self._dictionary_record}

    def build_model(self, cfg, from_checkpoint=False):
        if (
            not from_checkpoint
        ):  # a training run (a checkpoint being loaded builds its model from_checkpoint)
            check_start_checkpoint(self.cfg)
        model = super().build_model(cfg, from_checkpoint)
        if self.cfg.freeze_embeddings:
            frozen = freeze_token_embeddings(model)
            logger.info("token embeddings frozen (task.freeze_embeddings): %s", ", ".join(frozen))
        if self.cfg.exempt_from_weight_decay:
            exempt = exempt_from_weight_decay(model)
            logger.info(
                "no weight decay on %d biases and LayerNorm weights (task.exempt_from_weight_decay)",
                len(exempt),
            )
        return model

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        paths = utils.split_paths(self.cfg.data)
        split_path = os.path.join(paths[(epoch - 1) % len(paths)], split)
        dataset = data_utils.load_indexed_dataset(
            split_path, self.source_dictionary, combine=combine
        )
        if dataset is None:
            raise BioFileNotFoundError(
                f"{split_path}.bin/.idx: no binarised {split} split (task.data={self.cfg.data})"
            )
        block = self.cfg.tokens_per_sample - 1  # room for <s>
        if self.cfg.sample_break_mode != "none":
            dataset = ChunkedSentenceDataset.wrap_if_needed(dataset, block)
        # One sentence per block is what the chunked sentences already are (and fairseq's own "eos"
        # mode needs numpy.compat, which numpy 2 removed).
        if self.cfg.sample_break_mode != "eos":
            dataset = TokenBlockDataset(
                dataset,
                dataset.sizes,
                block,
                pad=self.source_dictionary.pad(),
                eos=self.source_dictionary.eos(),
                break_mode=self.cfg.sample_break_mode,
            )
        dataset = PrependTokenDataset(dataset, self.source_dictionary.bos())
        logger.info("loaded %d blocks from %s", len(dataset), split_path)
        with data_utils.numpy_seed(self.cfg.seed):
            shuffle = np.random.permutation(len(dataset))
        # Scoring needs every held-out block; training (fairseq's default dataset.train_subset)
        # keeps fairseq's batching, as its masked_lm: at most dataset.required_batch_size_multiple -
        # 1 blocks outside the batches.
        self.datasets[split] = (SortDataset if split == "train" else BlocksDataset)(
            NestedDictionaryDataset(
                {
                    "id": IdDataset(),
                    "first_id": FirstIdDataset(),
                    "net_input": {
                        "src_tokens": RightPadDataset(
                            dataset, pad_idx=self.source_dictionary.pad()
                        ),
                        "src_lengths": NumelDataset(dataset, reduce=False),
                    },
                    "nsentences": NumSamplesDataset(),
                    "ntokens": NumelDataset(dataset, reduce=True),
                },
                sizes=[dataset.sizes],
            ),
            sort_order=[shuffle, dataset.sizes],
        )

    def mask_prob_at(self, update_num: int) -> float:
        """The masking rate in force at ``update_num``."""
        if not self.mask_prob_schedule:
            return self.cfg.mask_prob
        step = update_num * len(self.mask_prob_schedule) // self.cfg.max_update
        return self.mask_prob_schedule[min(step, len(self.mask_prob_schedule) - 1)]

    def mask_sample(self, sample, mask_prob: float, stream: int):
        """A copy of ``sample`` with masked ``src_tokens`` and its ``target``; the randomness is
        fixed by the task seed, ``stream`` (the update number; -1 for validation) and the batch's
        sample ids.
        """
        tokens = sample["net_input"]["src_tokens"]
        key = (self.cfg.seed, stream, first_id(sample), sample["id"].numel(), tokens.size(1))
        generator = torch.Generator(device=tokens.device)
        generator.manual_seed(hash(key) & 0x7FFF_FFFF_FFFF_FFFF)
        corrupted, target = self.masker(tokens, mask_prob, generator)
        return {
            **sample,
            "net_input": {**sample["net_input"], "src_tokens": corrupted},
            "target": target,
        }

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        if self.cfg.exempt_from_weight_decay and not self._decay_checked:
            check_weight_decay_exemption(optimizer)
            self._decay_checked = True
        mask_prob = self.mask_prob_at(update_num)
        if self.mask_prob_schedule:
            metrics.log_scalar("mask_prob", mask_prob, weight=0, round=3)
        sample = self.mask_sample(sample, mask_prob, stream=update_num)
        result = super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)
        if update_num < self.cfg.head_warmup_updates:
            drop_gradients_outside_head(model)
        return result

    def valid_step(self, sample, model, criterion):
        # A fixed rate and fixed masks, so that validation losses compare across the run.
        return super().valid_step(
            self.mask_sample(sample, self.cfg.mask_prob, stream=-1), model, criterion
        )


def check_weight_decay_exemption(optimizer) -> None:
    """Refuse, in one line, an optimizer that would decay the parameters
    ``task.exempt_from_weight_decay`` marked: every parameter it holds that carries a weight-decay
    scale of 0 must sit in a group without weight decay, and there must be such parameters
    (fairseq's flat fp32 master copy under fp16 carries no marks)."""
    groups = _param_groups(optimizer)
    if not any(group.get("weight_decay", 0.0) for group in groups):
        return  # nothing is decayed at all
    marked = honoured = 0
    for group in groups:
        for param in group["params"]:
            overrides = (getattr(param, "optim_overrides", None) or {}).get("optimizer") or {}
            if overrides.get("weight_decay_scale") == 0.0:
                marked += 1
                honoured += group.get("weight_decay", 0.0) == 0.0
    if not marked or honoured < marked:
        raise BioConfigError(
            "task.exempt_from_weight_decay=true: the optimizer would still decay biases and LayerNorm weights; use "
            "optimizer._name=bio_adamw, and under fp16 common.fp16_no_flatten_grads=true (one fp32 master tensor per "
            f"parameter), not {type(getattr(optimizer, 'fp32_optimizer', optimizer)).__name__} "
            f"with {sum(len(g['params']) for g in groups)} parameter tensor(s)"
        )


def _param_groups(optimizer) -> list:
    """The torch param groups behind a fairseq optimizer, its fp16 wrapper, or fairseq's composite
    optimizer (whose own torch optimizer has none: they are its per-group optimizers')."""
    inner = (
        getattr(optimizer, "fp32_optimizer", None)
        or getattr(optimizer, "wrapped_optimizer", None)
        or optimizer
    )
    parts = getattr(inner, "optimizers", None)
    if isinstance(parts, dict):
        return [group for part in parts.values() for group in part.param_groups]
    return list(optimizer.param_groups)


def check_start_checkpoint(cfg) -> None:
    """A named ``checkpoint.restore_file`` or ``finetune_from_model`` that does not exist is an
    error: fairseq would log "No existing checkpoint found" and pretrain from random initialisation.
    fairseq's own resume (the default ``checkpoint_last.pt`` in ``save_dir``, which also wins over
    ``finetune_from_model``) is untouched.
    """
    restore = getattr(cfg, "restore_file", None)
    if restore and restore != "checkpoint_last.pt" and not os.path.exists(restore):
        raise BioFileNotFoundError(
            f"checkpoint.restore_file={restore}: no such checkpoint (fairseq would start from random initialisation; "
            "leave restore_file unset to start from scratch)"
        )
    start = getattr(cfg, "finetune_from_model", None)
    resuming = os.path.exists(
        os.path.join(getattr(cfg, "save_dir", None) or ".", "checkpoint_last.pt")
    )
    if start and not os.path.exists(start) and not resuming:
        raise BioFileNotFoundError(f"checkpoint.finetune_from_model={start}: no such checkpoint")


def first_id(sample) -> int:
    """The batch's first sample id, a key of its masks: the collater's ``first_id``, on the host
    (``ids[0]`` of the copy the trainer moved to the GPU would wait for the device), else read from
    ``id``."""
    first = sample.get("first_id")
    if first is None:
        ids = sample["id"]
        first = int(ids[0]) if ids.numel() else 0
    return first


class FirstIdDataset(IdDataset):
    """A batch's first sample id as a Python int: the masks' key (``mask_sample``), known on the
    host after the trainer has moved the batch's tensors to the GPU."""

    def collater(self, samples):
        return int(samples[0]) if len(samples) else 0


class BlocksDataset(KeepsEveryExample, SortDataset):
    """fairseq's ``SortDataset`` whose batches keep every block, for the held-out splits: fairseq
    drops the last blocks that do not fill a multiple of ``required_batch_size_multiple`` (8), so a
    valid split of 5 blocks gave no batch at all (and fairseq-validate a ZeroDivisionError)."""


def drop_gradients_outside_head(model) -> int:
    """Clear the gradient of every parameter but the MLM head's own (``HEAD_PREFIX``; the tied
    output weight is registered as the token embeddings, so it is cleared too): the optimizer skips
    a parameter without a gradient (no step, no weight decay). Returns how many parameters were
    cleared."""
    cleared = 0
    for name, param in model.named_parameters():
        if not name.startswith(HEAD_PREFIX) and param.grad is not None:
            param.grad = None
            cleared += 1
    return cleared


def freeze_token_embeddings(model) -> List[str]:
    """``requires_grad=False`` on every token-embedding matrix (a tied output weight is the same
    parameter), so that fairseq's trainer leaves it out of the optimizer; the names frozen."""
    frozen = []
    for name, param in model.named_parameters():
        if name.endswith("embed_tokens.weight"):
            param.requires_grad_(False)
            frozen.append(name)
    if not frozen:
        raise BioConfigError(
            f"task.freeze_embeddings: {type(model).__name__} has no embed_tokens.weight to freeze"
        )
    return frozen


def check_binarised(data: str) -> None:
    """Refuse, in one line saying what to run, a ``task.data`` that is raw text rather than
    binarised directories."""
    steps = (
        "encode and binarise it first: fairseq-bio-encode --vocab VOCAB train.txt valid.txt --out "
        "train.bpe valid.bpe, then fairseq-bio-binarize --vocab VOCAB --train train.bpe --valid valid.bpe --out "
        "data-bin (VOCAB from fairseq-bio-vocab; `make demo` runs every step), and give task.data=data-bin"
    )
    for i, path in enumerate(utils.split_paths(data)):
        if os.path.isfile(path):
            raise BioConfigError(
                f"task.data={path}: a file, not a binarised data directory (dict.txt, train.bin/.idx); "
                f"if it is text, {steps}"
            )
        if not os.path.isdir(path):
            raise BioFileNotFoundError(f"task.data={path}: no such directory")
        if i == 0 and not os.path.exists(
            os.path.join(path, "dict.txt")
        ):  # the other shards need only .bin/.idx
            raise BioFileNotFoundError(
                f"task.data={path}: no dict.txt, so not a binarised data directory; if it holds "
                f"text, {steps}"
            )


def _parse_schedule(text: str) -> List[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BioConfigError(
            f'task.mask_prob_schedule: "{text}" is not a comma-separated list of rates'
        ) from None
