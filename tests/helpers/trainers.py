"""fairseq's Trainer driven in-process, as fairseq-train drives it, on the shipped pretraining
recipe with a tiny encoder over a 24-word vocabulary: the CPU tests of the GPU code paths (mixed
precision, multi-tensor copies and steps) and the GPU checks' own bit-for-bit comparisons."""

import copy
import json

import pytest
import torch
from fairseq import metrics
from fairseq.optim.fp16_optimizer import FP16Optimizer
from helpers.distillation import SYMBOLS, write_dict
from helpers.hydra_configs import composed
from helpers.tensors import assert_same_state

import fairseq_bio  # noqa: F401  (registration; installs the plugin's trainer)
from fairseq_bio.patches.mixed_precision import MultiTensorFP16Optimizer

SIZES = dict(
    encoder_layers=2, encoder_embed_dim=32, encoder_ffn_embed_dim=64, encoder_attention_heads=4
)
TINY = [f"model.{k}={v}" for k, v in SIZES.items()] + [
    "model.max_positions=32",
    "model.dropout=0.0",
    "model.attention_dropout=0.0",
]
STEPS = 4
# No device but the CPU, whatever the machine has; fp16's fp32 master weights one tensor per
# parameter (the flat copy needs CUDA, fp16_optimizer.py:38).
CPU = ["common.cpu=true", "common.fp16_no_flatten_grads=true", "optimization.max_update=100"]
# No warm-up: every update compared moves the weights by about the learning rate.
WARMUP = "lr_scheduler.warmup_updates=0"


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory):
    """dict.txt (24 symbols) and a bpe.json: what the masked-LM and fine-tuning tasks read."""
    directory = write_dict(tmp_path_factory.mktemp("vocab"), SYMBOLS)
    (directory / "bpe.json").write_text(json.dumps({"_name": "bert"}))
    return directory


def text_batch(task, lengths=(14, 14, 11, 14, 9, 14, 12, 14)):
    """Rows of random words (``<s> ... </s>``, padded to the longest), unmasked: bio_masked_lm's
    ``train_step`` masks them, the same way in every run (its masks depend on the task seed, the
    update and the sample ids).
    """
    d = task.source_dictionary
    g = torch.Generator().manual_seed(2)
    tokens = torch.full((len(lengths), max(lengths)), d.pad())
    for row, n in enumerate(lengths):
        tokens[row, :n] = torch.randint(d.nspecial, len(d) - 1, (n,), generator=g)
        tokens[row, 0], tokens[row, n - 1] = d.bos(), d.eos()
    return {
        "id": torch.arange(len(lengths)),
        "nsentences": len(lengths),
        "ntokens": sum(lengths),
        "net_input": {"src_tokens": tokens, "src_lengths": torch.tensor(lengths)},
    }


def pretraining_setup(vocab_dir, precision, *overrides):
    """The bio-lm pretraining recipe (bio_roberta_base's config, fairseq's masked_lm criterion) on a
    tiny encoder: (cfg, task, model, criterion, sample)."""
    from fairseq import tasks

    cfg = composed(
        "bio_roberta_base",
        f"precision={precision}",
        f"task.data={vocab_dir}",
        "optimization.lr=[1e-3]",
        WARMUP,
        *TINY,
        *CPU,
        *overrides,
    )
    task = tasks.setup_task(cfg.task)
    torch.manual_seed(0)
    model, criterion = task.build_model(cfg.model), task.build_criterion(cfg.criterion)
    return cfg, task, model, criterion, text_batch(task)


def plugin_trainer():
    """The trainer class fairseq-train builds once the plugin is imported."""
    from fairseq_cli import train

    return train.Trainer


def trained(trainer_class, vocab_dir, *overrides):
    """``STEPS`` updates of ``trainer_class`` on the pretraining recipe's tiny encoder (the same
    initial weights in every call): (trainer, gradient norms)."""
    cfg, task, model, criterion, sample = pretraining_setup(vocab_dir, *overrides)
    trainer = trainer_class(cfg, task, model, criterion)
    norms = []
    for _ in range(STEPS):
        with metrics.aggregate(new_root=True) as logged:
            trainer.train_step([copy.deepcopy(sample)])
        norms.append(float(logged["gnorm"].val))
    return trainer, norms


def assert_fairseqs_updates(vocab_dir, precision, *overrides):
    """fairseq's Trainer against the plugin's (what fairseq-train builds) on the pretraining
    recipe's tiny encoder: the plugin's wraps the optimizer in ``MultiTensorFP16Optimizer``, and
    after ``STEPS`` updates the model's weights, the fp32 master weights, the optimizer state, the
    loss scale and the logged gradient norms are fairseq's, bit for bit. Returns the plugin's
    trainer."""
    from fairseq.trainer import Trainer

    ours, our_norms = trained(plugin_trainer(), vocab_dir, precision, *overrides)
    theirs, their_norms = trained(Trainer, vocab_dir, precision, *overrides)
    assert (
        type(theirs.optimizer) is FP16Optimizer and type(ours.optimizer) is MultiTensorFP16Optimizer
    )
    assert (
        our_norms == their_norms and len(set(our_norms)) == STEPS
    )  # every update moved the weights
    for p, q in zip(ours.model.parameters(), theirs.model.parameters(), strict=True):
        assert p.dtype == q.dtype != torch.float32 and torch.equal(p, q)
    masters = lambda o: (
        list(o.fp32_params.values()) if o.has_flat_params else o.fp32_params
    )  # noqa: E731
    for p, q in zip(masters(ours.optimizer), masters(theirs.optimizer), strict=True):
        assert p.dtype == torch.float32 and torch.equal(p, q)
    assert_same_state(
        ours.optimizer.state_dict(), theirs.optimizer.state_dict()
    )  # the loss scale with it (fp16)
    assert (
        ours.get_lr() == theirs.get_lr()
        and ours.get_num_updates() == theirs.get_num_updates() == STEPS
    )
    return ours
