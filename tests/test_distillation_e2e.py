"""Distillation end to end on the real PubMed slice, with the suite's tiny pretrained encoder (2
x 128) as teacher: fairseq-bio-init-student makes a 1-layer student of every other teacher layer,
fairseq-hydra-train with the presets lowers its KL to the teacher and saves a plain bio_roberta;
fairseq's own Trainer optimises exactly the student's and the projections' parameters and leaves the
teacher bit-identical; a run resumed from a checkpoint reproduces the uninterrupted run's losses.

Measured here (1 thread): the every-other student starts at KL 0.011 (T = 2, DistilBioBERT's
weights, lr 1e-4) and reaches ~0.005 within 20 updates; 0.01 is low because the student already is
the teacher minus its top layer."""

import hashlib
import shutil

import pytest
import torch
from conftest import logged, run_cli
from helpers.distillation import composed

from fairseq_bio import runs
from fairseq_bio.checkpoints import load_checkpoint

CPU = [
    "common.cpu=true",
    "common.fp16=false",
    "task.tokens_per_sample=128",
    "model.max_positions=128",
    "dataset.batch_size=16",
    "optimization.update_freq=[1]",
    "dataset.num_workers=0",
    "dataset.max_valid_steps=5",
    "lr_scheduler.warmup_updates=5",
    "common.log_format=json",
    "common.tensorboard_logdir=null",
    "model._name=bio_roberta",
]
ONE_LAYER = [
    "model.encoder_layers=1",
    "model.encoder_embed_dim=128",
    "model.encoder_ffn_embed_dim=512",
    "model.encoder_attention_heads=2",
]
# TinyBioBERT-like: narrower than the teacher, same heads
NARROW = [
    "model.encoder_layers=1",
    "model.encoder_embed_dim=64",
    "model.encoder_ffn_embed_dim=256",
    "model.encoder_attention_heads=2",
]


def distill(config, data, teacher, save_dir, *overrides, updates):
    """``config`` trained on ``data``; returns the json log's path."""
    log = save_dir / "train.log"
    run_cli(
        runs.hydra_train(
            config,
            f"task.data={data}",
            f"criterion.teacher={teacher}",
            f"optimization.max_update={updates}",
            *CPU,
            *overrides,
            save_dir=save_dir,
            log=log,
        ),
        cwd=save_dir,
        timeout=600,
    )
    return log


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def student_init(tiny_encoder, tmp_path_factory):
    out = tmp_path_factory.mktemp("student-init") / "student.pt"
    run_cli(
        [
            "fairseq-bio-init-student",
            "--checkpoint",
            tiny_encoder,
            "--layers",
            "every-other",
            "--out",
            out,
        ],
        cwd=out.parent,
    )
    return out


def test_distillation_lowers_kl_and_saves_a_plain_student(
    tiny_encoder, student_init, data_bin, tmp_path
):
    teacher_hash = sha256(tiny_encoder)
    log = distill(
        "distill_distilbiobert",
        data_bin("bytebpe"),
        tiny_encoder,
        tmp_path,
        *ONE_LAYER,
        f"checkpoint.finetune_from_model={student_init}",
        "optimization.lr=[0.0001]",
        "common.log_interval=5",
        "dataset.validate_interval_updates=40",
        "checkpoint.save_interval_updates=1000",
        updates=40,
    )
    inner, valid = logged(log, "train_inner"), logged(log, "valid")
    assert sorted(inner) == [5, 10, 15, 20, 25, 30, 35, 40] and 40 in valid
    for entry in list(inner.values()) + [valid[40]]:  # each term logged on its own
        assert {"loss", "mlm_loss", "kl_loss", "cos_loss"} <= set(
            entry
        ) and "attn_loss" not in entry
    first, late = float(inner[5]["kl_loss"]), max(float(inner[u]["kl_loss"]) for u in (30, 35, 40))
    assert late < 0.75 * first, (first, late)  # updates 1-5 start from the initialised student
    assert float(valid[40]["kl_loss"]) < 0.75 * first

    # the saved student is a plain 1-layer bio_roberta: the init checkpoint's tensors, none of the
    # teacher's others
    state = load_checkpoint(tmp_path / "checkpoint_last.pt")
    init = load_checkpoint(student_init)["model"]
    assert set(state["model"]) == set(init) and not any(".layers.1." in k for k in state["model"])
    assert (
        state["criterion"] is None
    )  # equal widths: no projection, nothing of the criterion to keep
    assert sha256(tiny_encoder) == teacher_hash

    from fairseq import checkpoint_utils

    models, _, _ = checkpoint_utils.load_model_ensemble_and_task(
        [str(tmp_path / "checkpoint_last.pt")]
    )
    assert (
        type(models[0]).__name__ == "BioRobertaModel"
        and len(models[0].encoder.sentence_encoder.layers) == 1
    )
    # the optimizer's state is one Adam slot per student parameter, in order: nothing of the
    # teacher's
    adam = state["last_optimizer_state"]["state"]
    assert [tuple(adam[i]["exp_avg"].shape) for i in sorted(adam)] == [
        tuple(p.shape) for p in models[0].parameters()
    ]


def test_trainer_optimises_only_student_and_projections(tiny_encoder, data_bin, tmp_path):
    """fairseq's Trainer (what fairseq-train runs) on a narrower student: the optimizer's parameters
    are exactly the student's and the learned projections, the teacher is untouched, the KL falls,
    and the checkpoint keeps the projections under "criterion" and only student tensors under
    "model"."""
    from fairseq import tasks
    from fairseq.trainer import Trainer

    cfg = composed(
        "distill_tinybiobert",
        *CPU,
        *NARROW,
        "optimization.lr=[0.002]",
        f"checkpoint.save_dir={tmp_path}",
        "dataset.batch_size=8",
    )
    cfg.task.data, cfg.criterion.teacher = str(data_bin("bytebpe")), str(tiny_encoder)
    task = tasks.setup_task(cfg.task)
    torch.manual_seed(1)
    model, criterion = task.build_model(cfg.model), task.build_criterion(cfg.criterion)
    teacher_before = {k: v.clone() for k, v in criterion.teacher.state_dict().items()}
    trainer = Trainer(cfg, task, model, criterion)
    optimised = {id(p) for p in trainer.optimizer.params}
    student, projections = {id(p) for p in model.parameters()}, {
        id(p) for p in criterion.parameters()
    }
    assert (
        len(projections) == 4
    )  # 64 -> 128: embed_projection (eq. 7's W_e), layer_projection (eq. 6's W_h)
    assert optimised == student | projections
    assert not optimised & {id(p) for p in criterion.teacher.parameters()}

    task.load_dataset("valid")
    valid = next(
        iter(
            task.get_batch_iterator(task.dataset("valid"), max_sentences=16).next_epoch_itr(
                shuffle=False
            )
        )
    )
    kl_before = float(trainer.valid_step(valid)["kl_loss"])
    projection = criterion.layer_projection.weight.detach().clone()
    epoch = trainer.get_train_iterator(epoch=1)
    for _, sample in zip(range(25), epoch.next_epoch_itr(shuffle=True)):
        trainer.train_step([sample])
    kl_after = float(trainer.valid_step(valid)["kl_loss"])
    print(f"valid KL over every token {kl_before:.4f} -> {kl_after:.4f} in 25 updates")
    assert kl_after < 0.5 * kl_before, (kl_before, kl_after)
    assert not torch.equal(projection, criterion.layer_projection.weight)
    teacher_after = criterion.teacher.state_dict()
    assert all(torch.equal(teacher_before[k], teacher_after[k]) for k in teacher_before)
    assert all(
        torch.equal(teacher_after[k], v) for k, v in load_checkpoint(tiny_encoder)["model"].items()
    )

    trainer.consolidate_optimizer()  # as checkpoint_utils.save_checkpoint does before saving
    trainer.save_checkpoint(str(tmp_path / "checkpoint.pt"), {"train_iterator": epoch.state_dict()})
    saved = load_checkpoint(tmp_path / "checkpoint.pt")
    assert set(saved["model"]) == set(model.state_dict())
    assert (
        saved["model"]["encoder.sentence_encoder.embed_tokens.weight"].shape[1] == 64
    )  # the student's, not 128
    assert sorted(saved["criterion"]) == [
        f"{p}_projection.{w}" for p in ("embed", "layer") for w in ("bias", "weight")
    ]


def test_resume_reproduces_the_uninterrupted_losses(tiny_encoder, data_bin, tmp_path):
    """A run killed after its update-10 checkpoint and started again (the teacher re-loaded,
    projections, optimizer, data position and masks restored) logs the same losses for updates 11-20
    as the run that was never stopped.
    """
    common = [
        *NARROW,
        "optimization.lr=[0.002]",
        "common.log_interval=1",
        "checkpoint.save_interval_updates=10",
        "checkpoint.keep_interval_updates=5",
        "dataset.validate_interval_updates=1000",
    ]
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    whole.mkdir(), resumed.mkdir()
    log = distill(
        "distill_tinybiobert", data_bin("bytebpe"), tiny_encoder, whole, *common, updates=20
    )
    shutil.copy(
        whole / "checkpoint_1_10.pt", resumed / "checkpoint_last.pt"
    )  # what a kill after update 10 leaves
    log2 = distill(
        "distill_tinybiobert", data_bin("bytebpe"), tiny_encoder, resumed, *common, updates=20
    )
    a, b = logged(log, "train_inner"), logged(log2, "train_inner")
    assert sorted(b) == list(range(11, 21))
    terms = ("loss", "kl_loss", "embed_loss", "hidden_loss", "attn_loss")
    for update in range(11, 21):
        assert {t: a[update][t] for t in terms} == {t: b[update][t] for t in terms}, update
