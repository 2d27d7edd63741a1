"""Host reads of the pretraining step (benchmarks/host_reads.py): the places one training step hands
a tensor's value to Python, each a wait for the device on a GPU (issue 36). The step of the recipes
(``bio_masked_lm`` task, fairseq's ``masked_lm`` criterion, the plugin's trainer) on real PubMed
blocks, counted on the CPU."""

import argparse
import collections
import copy
import sys

import torch
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import host_reads  # noqa: E402

# What a step still reads, by (file, function), per step, and why it stays:
REMAINING = {
    # fairseq's masked_lm: on the CPU "is anything masked" (torch.where on a GPU, no read), and the
    # masked targets
    ("fairseq/criterions/masked_lm.py", "forward"): 2,
    # fairseq's train_step: `sample_size or 1.0` and `isfinite(grad_norm).all()` (raise on NaN/inf)
    ("fairseq/trainer.py", "train_step"): 2,
    # the LM head on the masked positions only, fairseq's boolean mask (their number sizes the
    # head's matmul)
    ("fairseq_bio/modules/masking.py", "take_positions"): 1,
    # whether the batch has padding, once (no padding mask: the fused attention kernels)
    ("fairseq_bio/modules/transformer_encoder.py", "forward"): 1,
}

# The fused head and loss (criterion bio_masked_lm): the masked positions read once, before the
# forward, as indices
REMAINING_FUSED = {
    ("fairseq/trainer.py", "train_step"): 2,
    ("fairseq_bio/modules/masking.py", "flat_positions"): 1,
    ("fairseq_bio/modules/transformer_encoder.py", "forward"): 1,
}

# ELECTRA's step (bio_electra task and criterion): its counts stay on the device; what remains, per
# step:
REMAINING_ELECTRA = {
    (
        "fairseq/trainer.py",
        "train_step",
    ): 1,  # isfinite(grad_norm).all() (its sample size is a Python 1)
    # how many masked positions (the generator's head, the targets, the replacements), once, before
    # the generator
    ("fairseq_bio/modules/masking.py", "flat_positions"): 1,
    (
        "fairseq_bio/modules/transformer_encoder.py",
        "forward",
    ): 2,  # padding or not, once per encoder
}


def reads_of(data: str, layers: int, task="bio_masked_lm", criterion="masked_lm"):
    electra = task == "bio_electra"
    args = argparse.Namespace(
        data=data,
        device="cpu",
        arch="bio_electra_tiny" if electra else "bio_roberta_base",
        tiny=not electra,
        layers=layers,
        batch=2,
        steps=2,
        task=task,
        criterion="bio_electra" if electra else criterion,
        fp32=False,
    )
    return host_reads.measure(args)


def by_function(result):
    counts = {}
    for row in result["reads"]:
        path, rest = row["site"].split(":", 1)
        key = (path, rest.split("(", 1)[1].rstrip(")"))
        counts[key] = counts.get(key, 0) + row["per_step"]
    return counts


def test_a_pretraining_step_reads_back_only_what_remains(data_bin):
    """The masking (its key and its random replacements), the encoder's per-layer padding check and
    the trainer's per-step logging read nothing back any more; what remains is ``REMAINING``,
    whatever the number of layers.
    """
    two, four = by_function(reads_of(data_bin(), 2)), by_function(reads_of(data_bin(), 4))
    assert two == four == REMAINING
    assert by_function(reads_of(data_bin(), 2, criterion="bio_masked_lm")) == REMAINING_FUSED


def test_the_masks_key_comes_from_the_host(data_bin):
    """The collated batch carries its first sample id as a Python int (``first_id``), and the masks
    made from it are the masks made from the batch's ids: the same key."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    import fairseq_bio  # noqa: F401

    parser = options.get_training_parser()
    argv = [
        str(data_bin()),
        "--task",
        "bio_masked_lm",
        "--arch",
        "bio_roberta_tiny",
        "--user-dir",
        str(REPO / "fairseq_bio"),
        "--cpu",
        "--tokens-per-sample",
        "64",
    ]
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, argv))
    task = tasks.setup_task(cfg.task)
    task.load_dataset("train")
    iterator = task.get_batch_iterator(
        task.dataset("train"), max_sentences=4, seed=1
    ).next_epoch_itr(shuffle=True)
    batch = next(b for b in iterator if int(b["id"][0]) != 0)
    assert type(batch["first_id"]) is int and batch["first_id"] == int(batch["id"][0])
    with_key = task.mask_sample(batch, 0.15, stream=7)
    without = task.mask_sample(
        {k: v for k, v in copy.deepcopy(batch).items() if k != "first_id"}, 0.15, stream=7
    )
    assert torch.equal(with_key["net_input"]["src_tokens"], without["net_input"]["src_tokens"])
    assert torch.equal(with_key["target"], without["target"])
    assert with_key["target"].ne(task.source_dictionary.pad()).any()


def test_an_electra_step_reads_back_only_what_remains(data_bin):
    """ELECTRA's step read 36 values per update at bio_electra_tiny's 4 + 4 layers (every logged
    count, the loss's normalisers, the discriminator's tokens by boolean mask, both encoders'
    per-layer padding check); now ``REMAINING_ELECTRA``, at 4 layers as at 2."""
    data = data_bin()
    four, two = (by_function(reads_of(data, layers, "bio_electra")) for layers in (None, 2))
    assert four == two == REMAINING_ELECTRA


def test_meters_take_a_device_weight_without_reading_it():
    """fairseq's AverageMeter as the plugin installs it (``trainer.update_meter``): a tensor weight
    (masked_lm's loss weighted by its masked-token count) is never read back, and the sum, count and
    average are fairseq's, an update of weight 0 (whose value is 0 / 0) included."""
    from fairseq.logging import meters

    from fairseq_bio.patches import trainer

    updates = [
        (torch.tensor(2.5), torch.tensor(4)),
        (torch.tensor(float("nan")), torch.tensor(0)),
        (torch.tensor(1.0), torch.tensor(2)),
        (None, torch.tensor(3)),
        (0.5, 1),
    ]
    ours, theirs = meters.AverageMeter(round=3), meters.AverageMeter(round=3)
    with host_reads.host_read_mode() as counted:
        for val, n in updates:
            trainer.update_meter(ours, val, n)
    assert counted.reads == collections.Counter()
    for val, n in updates:
        trainer._FAIRSEQ_UPDATE(theirs, val, n)
    assert float(ours.sum) == float(theirs.sum) == 2.5 * 4 + 1.0 * 2 + 0.5
    assert (
        int(ours.count) == int(theirs.count) == 7
        and ours.smoothed_value == theirs.smoothed_value == 1.786
    )
    assert meters.AverageMeter.update is trainer.update_meter  # installed with the plugin
    first_empty = meters.AverageMeter()
    trainer.update_meter(first_empty, torch.tensor(float("nan")), torch.tensor(0))
    assert (
        first_empty.avg.isnan() and float(first_empty.count) == 0
    )  # fairseq: count 0, so its avg is val (nan)
