"""Pretraining end to end on real PubMed text through fairseq's own CLIs: extract -> vocab ->
binarise (fixtures) -> fairseq-hydra-train / fairseq-train -> checkpoints, tensorboard, hub loading;
and a kill -9 in the middle of training that resumes to exactly the losses of an uninterrupted
run."""

import math

import torch
from conftest import logged, run_cli
from training_processes import first_update_after_restart, killed_at

from fairseq_bio import runs

SMALL_MODEL = [
    "model.encoder_layers=2",
    "model.encoder_embed_dim=64",
    "model.encoder_ffn_embed_dim=128",
    "model.encoder_attention_heads=4",
    "model.max_positions=64",
    "task.tokens_per_sample=64",
]


def hydra_train(data, save_dir, *overrides):
    """The bio_roberta_tiny config's training command line, small, with absolute paths (any working
    directory)."""
    return runs.hydra_train(
        "bio_roberta_tiny", f"task.data={data}", *SMALL_MODEL, *overrides, save_dir=save_dir
    )


def test_hydra_pretraining_on_pubmed_lowers_valid_loss(data_bin, tmp_path):
    data = data_bin("bytebpe")
    save, log = tmp_path / "ckpt", tmp_path / "train.log"
    run_cli(
        hydra_train(
            data,
            save,
            "optimization.max_update=80",
            "dataset.validate_interval_updates=20",
            "checkpoint.save_interval_updates=40",
            "lr_scheduler.warmup_updates=8",
            "optimization.lr=[0.001]",
            "common.log_format=json",
            "common.log_interval=10",
            f"common.log_file={log}",
        ),
        cwd=tmp_path,  # not the repository: everything comes through absolute paths
    )
    valid = logged(log, "valid")
    assert sorted(valid) == [20, 40, 60, 80]
    vocab_size = sum(1 for _ in open(data / "dict.txt")) + 5  # + <s> <pad> </s> <unk> <mask>
    uniform = math.log2(vocab_size)  # an untrained model's loss (fairseq logs base 2)
    first, last = float(valid[20]["loss"]), float(valid[80]["loss"])
    assert last < first < uniform + 0.5
    assert last < uniform - 0.5
    assert (save / "checkpoint_best.pt").exists() and (save / "checkpoint_last.pt").exists()
    events = list((save / "tensorboard").rglob("events.out.tfevents.*"))
    assert {p.parent.name for p in events} >= {"train", "train_inner", "valid"}

    # The checkpoint loads as a hub model: BPE from the data dir's bpe.json, plugin from this
    # install.
    from fairseq_bio.models.bio_roberta import BioRobertaModel

    hub = BioRobertaModel.from_pretrained(
        str(save), "checkpoint_best.pt", data_name_or_path=str(data)
    )
    hub.eval()
    tokens = hub.encode("Aspirin reduces the risk of myocardial infarction.")
    assert hub.decode(tokens) == "Aspirin reduces the risk of myocardial infarction."
    states = hub.extract_features(tokens, return_all_hiddens=True)
    assert len(states) == 3 and states[-1].shape == (1, len(tokens), 64)
    filled = hub.fill_mask("The patient was treated with <mask> for hypertension.", topk=3)
    assert len(filled) == 3 and all(
        text.startswith("The patient was treated with") for text, _, _ in filled
    )


def test_fairseq_train_argparse_workflow(data_bin, tmp_path):
    """Existing argparse workflows: fairseq-train --user-dir ... --task bio_masked_lm --arch
    bio_roberta_*."""
    data = data_bin("sentencepiece")
    run_cli(
        runs.train(
            data,
            "--task",
            "bio_masked_lm",
            "--arch",
            "bio_roberta_base",
            "--encoder-layers",
            "2",
            "--encoder-embed-dim",
            "64",
            "--encoder-ffn-embed-dim",
            "128",
            "--encoder-attention-heads",
            "4",
            "--criterion",
            "masked_lm",
            "--mask-whole-words",
            "--mask-prob-schedule",
            "0.05,0.25",
            "--tokens-per-sample",
            "64",
            "--batch-size",
            "8",
            "--optimizer",
            "adam",
            "--lr",
            "1e-4",
            "--max-update",
            "6",
            "--log-interval",
            "1",
            "--log-format",
            "json",
            "--cpu",
            "--save-dir",
            tmp_path / "ckpt",
            "--no-epoch-checkpoints",
            "--log-file",
            tmp_path / "train.log",
        ),
        cwd=tmp_path,
    )
    inner = logged(tmp_path / "train.log", "train_inner")
    assert [float(inner[u]["mask_prob"]) for u in sorted(inner)] == [
        0.05,
        0.05,
        0.05,
        0.25,
        0.25,
        0.25,
    ]
    state = torch.load(tmp_path / "ckpt" / "checkpoint_last.pt", weights_only=True)
    assert (
        state["cfg"]["model"]["_name"] == "bio_roberta_base"
        and state["cfg"]["model"]["encoder_layers"] == 2
    )
    assert state["model"]["encoder.sentence_encoder.embed_tokens.weight"].shape[1] == 64


def test_kill_9_and_restart_resumes_to_the_uninterrupted_losses(data_bin, tmp_path):
    data = data_bin("bytebpe")
    settings = [
        "optimization.max_update=60",
        "checkpoint.save_interval_updates=20",
        "dataset.disable_validation=true",
        "lr_scheduler.warmup_updates=6",
        "common.log_format=json",
        "common.log_interval=5",
        "common.tensorboard_logdir=null",
    ]
    reference_log = tmp_path / "reference.log"
    run_cli(
        hydra_train(data, tmp_path / "reference", *settings, f"common.log_file={reference_log}"),
        cwd=tmp_path,
    )
    reference = logged(reference_log, "train_inner")
    assert sorted(reference) == list(range(5, 61, 5))

    save, log = tmp_path / "interrupted", tmp_path / "interrupted.log"
    command = hydra_train(data, save, *settings, f"common.log_file={log}")
    assert killed_at(command, log, 30, cwd=tmp_path) < 60  # checkpoint_last.pt saved at 20 by then

    run_cli(command, cwd=tmp_path)  # the same command again
    # resumed from checkpoint_last.pt (saved at 20 or 40), not from scratch
    assert first_update_after_restart(log) in (25, 45)
    resumed = logged(log, "train_inner")  # later (post-resume) entries replace the killed run's
    assert sorted(resumed) == sorted(reference)
    for update in reference:
        assert resumed[update]["loss"] == reference[update]["loss"], update
        assert resumed[update]["lr"] == reference[update]["lr"], update
