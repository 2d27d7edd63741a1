"""The ``bio_masked_lm`` criterion (issue 36): fairseq's ``masked_lm`` loss, sample size and logging
with the LM head's output matmul and cross-entropy fused (no ``N x V`` logits), in fp32 and bf16,
its fallbacks, and a hydra training run of the shipped pretraining config with it."""

import copy

import pytest
import torch
from conftest import logged, run_cli
from fairseq.criterions.masked_lm import MaskedLmConfig, MaskedLmLoss
from helpers.small_models import SMALL, DictionaryTask, make_dictionary, model_args

from fairseq_bio import runs
from fairseq_bio.checkpoints import load_checkpoint
from fairseq_bio.criterions.bio_masked_lm import BioMaskedLmConfig, BioMaskedLmLoss
from fairseq_bio.models import bio_roberta
from fairseq_bio.models.bio_roberta import BioRobertaModel

VOCAB = 300  # wider than the model (32), as vocabularies are


@pytest.fixture(scope="module")
def task():
    dictionary, _ = make_dictionary([f"w{i}" for i in range(VOCAB)])
    return DictionaryTask(dictionary)


def model_and_sample(task, seed=0, masked_share=0.15):
    torch.manual_seed(seed)
    args = model_args(max_positions=64, dropout=0.0, attention_dropout=0.0, **SMALL)
    model = BioRobertaModel.build_model(args, task)
    d = task.source_dictionary
    tokens = torch.randint(d.nspecial, len(d) - 1, (4, 48))
    tokens[3, 40:] = d.pad()  # a padded row
    chosen = (torch.rand(tokens.shape) < masked_share) & tokens.ne(d.pad())
    target = torch.where(chosen, tokens, torch.full_like(tokens, d.pad()))
    sample = {
        "net_input": {"src_tokens": tokens.masked_fill(chosen, len(d) - 1)},
        "target": target,
        "ntokens": int(tokens.ne(d.pad()).sum()),
        "nsentences": 4,
    }
    return model, sample


def loss_and_grads(criterion, model, sample):
    model.zero_grad()
    loss, sample_size, logging = criterion(model, sample)
    loss.backward()
    return (
        loss.detach(),
        sample_size,
        logging,
        {n: p.grad.clone() for n, p in model.named_parameters()},
    )


def criteria(task, fused=True):
    return (
        MaskedLmLoss(MaskedLmConfig(tpu=False), task),
        BioMaskedLmLoss(BioMaskedLmConfig(tpu=False, fused_head=fused), task),
    )


@pytest.mark.parametrize("masked_share", [0.15, 0.0])
def test_fused_loss_and_gradients_are_fairseqs(task, masked_share):
    """fp32: the same summed loss, sample size, logging output and every gradient as fairseq's
    masked_lm (0 % masked: fairseq's all-positions case, whose targets are all pads: a loss of 0 on
    both)."""
    stock, fused = criteria(task)
    model, sample = model_and_sample(task, masked_share=masked_share)
    expected = loss_and_grads(stock, model, sample)
    got = loss_and_grads(fused, model, sample)
    torch.testing.assert_close(got[0], expected[0], rtol=1e-5, atol=1e-4)
    assert (
        (float(got[0]) > 1.0) == (masked_share > 0)
        and got[1] == expected[1]
        and got[2].keys() == expected[2].keys()
    )
    assert {k: v for k, v in got[2].items() if k != "loss"} == {
        k: v for k, v in expected[2].items() if k != "loss"
    }
    for name, grad in expected[3].items():
        torch.testing.assert_close(got[3][name], grad, rtol=1e-4, atol=1e-6, msg=name)
    if masked_share:
        assert (
            expected[3]["encoder.sentence_encoder.embed_tokens.weight"].abs().sum() > 0
        )  # the tied head learns


def test_fused_loss_holds_no_logits(task, monkeypatch):
    """The fused path never asks the head for logits (fairseq's does): the forward runs through
    fused_lm_loss."""
    stock, fused = criteria(task)
    model, sample = model_and_sample(task)
    seen = []
    real = bio_roberta.padded_linear
    monkeypatch.setattr(
        bio_roberta, "padded_linear", lambda *a: seen.append(a[0].shape) or real(*a)
    )
    fused(model, sample)
    assert seen == []
    stock(model, sample)
    assert len(seen) == 1 and seen[0][1] == SMALL["encoder_embed_dim"]


def test_bf16_loss_is_the_fp32_one(task):
    """A bf16 model (as fairseq's --bf16 casts it): the fused loss, summed in fp32, is within bf16's
    rounding of fp32's, as close as fairseq's own bf16 loss is."""
    stock, fused = criteria(task)
    model, sample = model_and_sample(task)
    with torch.no_grad():
        reference = stock(model, sample)[0]
        half = copy.deepcopy(model).bfloat16()
        ours, theirs = fused(half, sample)[0], stock(half, sample)[0]
    assert (
        ours.dtype == torch.float32
    )  # summed in fp32, as fairseq's (a bf16 sum of the rows is ~1 % off)
    assert abs(float(ours) - float(reference)) <= max(
        2 * abs(float(theirs) - float(reference)), 1e-3 * float(reference)
    )


def test_fallbacks(task, monkeypatch):
    """fused_head=false, and a torch without linear_cross_entropy: fairseq's numbers again."""
    stock, unfused = criteria(task, fused=False)
    model, sample = model_and_sample(task)
    expected = stock(model, sample)[0]
    assert torch.equal(unfused(model, sample)[0], expected)
    monkeypatch.setattr(bio_roberta, "FUSED_LM_LOSS", False)
    torch.testing.assert_close(criteria(task)[1](model, sample)[0], expected, rtol=1e-6, atol=1e-5)


def test_pretraining_config_trains_with_it(data_bin, tmp_path):
    """The shipped tiny pretraining config with criterion=bio_masked_lm through fairseq's hydra
    entry point: the loss falls over 30 updates, the criterion is recorded in the checkpoint."""
    log = tmp_path / "train.log"
    run_cli(
        runs.hydra_train(
            "bio_roberta_tiny",
            f"task.data={data_bin('bytebpe')}",
            "++criterion._name=bio_masked_lm",
            "model.encoder_layers=1",
            "model.encoder_embed_dim=64",
            "model.encoder_ffn_embed_dim=128",
            "model.encoder_attention_heads=2",
            "task.tokens_per_sample=64",
            "dataset.batch_size=8",
            "optimization.max_update=30",
            "optimization.lr=[0.002]",
            "lr_scheduler.warmup_updates=5",
            "dataset.disable_validation=true",
            "common.log_interval=5",
            save_dir=tmp_path,
            log=log,
        ),
        cwd=tmp_path,
    )
    losses = [float(e["loss"]) for e in logged(log, "train_inner").values()]
    assert len(losses) >= 5 and losses[-1] < losses[0] - 0.5, losses
    state = load_checkpoint(tmp_path / "checkpoint_last.pt")
    assert (
        state["cfg"]["criterion"]["_name"] == "bio_masked_lm"
        and state["cfg"]["criterion"]["fused_head"]
    )
