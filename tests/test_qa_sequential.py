"""Sequential QA fine-tuning (BioMegatron's SQuAD -> BioASQ): a bio_extractive_qa run started from a
QA checkpoint takes its span head too (task.restore_head: null = when it fits, true = required,
false = a new head). A tiny QA run on tests/data/qa saves a checkpoint; a second run starts from it:
its model at update 0, set up and loaded by fairseq's own checkpoint_utils.load_checkpoint as
fairseq-hydra-train does before its first update, has the first run's span head (and a different one
with restore_head=false), and one real fairseq-hydra-train run logs what it did and trains from
there."""

import logging

import pytest
import torch
from conftest import REPO
from helpers.hydra_configs import composer, job_config
from helpers.qa import QA_DATA, fine_tune_qa, hydra_log

from fairseq_bio import runs

HEAD = "classification_heads.bio_qa."


@pytest.fixture(scope="module")
def first_run(tiny_encoder, tmp_path_factory):
    """checkpoint_last.pt of a 4-update QA run from the tiny encoder (the "SQuAD" run)."""
    save_dir = tmp_path_factory.mktemp("qa-first") / "run"
    fine_tune_qa(tiny_encoder, save_dir, "optimizer.groups.default.lr_float=0.001", updates=4)
    return save_dir / "checkpoint_last.pt"


def model_at_update_0(checkpoint, save_dir, *overrides):
    """The model of a bio_extractive_qa run from ``checkpoint`` before its first update: the shipped
    config composed as fairseq-hydra-train composes it, then fairseq_cli.train's own steps up to
    load_checkpoint.
    """
    from fairseq import checkpoint_utils, tasks
    from fairseq.trainer import Trainer

    with composer() as compose:
        overrides = [
            f"task.data={QA_DATA}",
            f"checkpoint.restore_file={checkpoint}",
            f"checkpoint.save_dir={save_dir}",
            f"common.user_dir={REPO / 'fairseq_bio'}",
            "task.doc_stride=32",
            "dataset.batch_size=8",
            *overrides,
        ]
        cfg = job_config(compose("bio_extractive_qa", overrides))
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    trainer = Trainer(cfg, task, model, task.build_criterion(cfg.criterion))
    checkpoint_utils.load_checkpoint(cfg.checkpoint, trainer)
    return {k: v.detach().cpu().clone() for k, v in trainer.model.state_dict().items()}


def weights(checkpoint):
    from fairseq_bio import checkpoints

    return checkpoints.load_checkpoint(checkpoint)["model"]


def head_of(state):
    return {k: v for k, v in state.items() if k.startswith(HEAD)}


def test_the_span_head_is_restored_at_update_0_unless_asked_not_to(first_run, tmp_path, caplog):
    first = weights(first_run)
    assert set(head_of(first)) == {HEAD + "out_proj.weight", HEAD + "out_proj.bias"}
    encoder_key = "encoder.sentence_encoder.layers.1.fc2.weight"
    outcomes = {}
    for option in ("null", "true", "false"):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="fairseq_bio"):
            state = model_at_update_0(first_run, tmp_path / option, f"task.restore_head={option}")
        assert torch.equal(
            state[encoder_key], first[encoder_key]
        )  # the encoder always comes from the checkpoint
        outcomes[option] = all(torch.equal(v, first[k]) for k, v in head_of(state).items())
        said = [
            r.getMessage() for r in caplog.records if r.getMessage().startswith("span head bio_qa:")
        ]
        assert (
            len(said) == 1
            and str(first_run) in said[0]
            and f"task.restore_head={option}" in said[0]
        ), said
        assert said[0].startswith(
            "span head bio_qa: restored" if option != "false" else "span head bio_qa: init"
        )
    assert outcomes == {"null": True, "true": True, "false": False}


def test_restore_head_true_needs_a_span_head_in_the_checkpoint(tiny_encoder, tmp_path, caplog):
    from fairseq_bio.errors import BioConfigError

    with pytest.raises(BioConfigError) as err:
        model_at_update_0(tiny_encoder, tmp_path / "true", "task.restore_head=true")
    text = str(err.value)
    assert text == (
        f"task.restore_head=true: {tiny_encoder} has no span head bio_qa, this run's is "
        "{'num_classes': 2, 'crf': False, 'lstm_layers': 0, 'lstm_hidden_size': 0, 'hidden_layers': 0, "
        "'hidden_size': 0}"
    )
    # by default an encoder checkpoint (no span head) starts a new one, and says so
    with caplog.at_level(logging.INFO, logger="fairseq_bio"):
        model_at_update_0(tiny_encoder, tmp_path / "null")
    assert any(
        r.getMessage() == f"span head bio_qa: initialised, not restored from {tiny_encoder} "
        "(task.restore_head=null: no bio_qa)"
        for r in caplog.records
    )


def test_a_second_qa_run_from_a_qa_checkpoint_trains_from_its_head(first_run, tmp_path):
    """The real command: fairseq-hydra-train from the first run's checkpoint logs the restore, and
    its dev loss at the first validation starts where the first run left off rather than from a new
    head."""
    second = tmp_path / "second"
    log = fine_tune_qa(first_run, second, "optimizer.groups.default.lr_float=1e-30", updates=1)
    assert f"span head bio_qa: restored from {first_run} (task.restore_head=null)" in hydra_log(
        second
    )
    # lr 1e-30 (0 is refused as a setting that cannot train): one update changes no fp32 weight, so
    # the saved head is the first run's
    after = weights(second / "checkpoint_last.pt")
    assert all(torch.equal(v, after[k]) for k, v in head_of(weights(first_run)).items())
    fresh = tmp_path / "fresh"
    fresh_log = fine_tune_qa(
        first_run,
        fresh,
        "optimizer.groups.default.lr_float=1e-30",
        "task.restore_head=false",
        updates=1,
    )
    assert (
        f"span head bio_qa: initialised, not restored from {first_run} (task.restore_head=false: not asked for)"
        in hydra_log(fresh)
    )
    first_dev = runs.logged(first_run.parent / "train.log", "valid")
    assert runs.logged(log, "valid")[1]["loss"] == pytest.approx(first_dev[4]["loss"], abs=0.002)
    assert runs.logged(fresh_log, "valid")[1]["loss"] != pytest.approx(
        first_dev[4]["loss"], abs=0.002
    )
