"""BioMegatron-shaped checkpoints downstream: a tiny ``bio_megatron_345m`` (pre-LayerNorm, no embedding LayerNorm,
final LayerNorm; 2 x 64 here) pretrained with fairseq-hydra-train records ``model._name=bio_megatron_345m``, and
every consumer of a bio_roberta checkpoint takes it: NER fine-tuning and fairseq-bio-predict, the distillation
teacher, fairseq-bio-init-student, fairseq-bio-export-hf (as HF MegatronBert, checked against transformers);
an HF MegatronBert imports exactly (1e-4) as such a checkpoint."""

import os

import pytest
import torch
from conftest import _pretrain_tiny, build_once, fine_tune, run_cli

from fairseq_bio import compat

os.environ["HF_HUB_OFFLINE"] = "1"
TOL = 1e-4
MEGATRON_SIZE = ["model._name=bio_megatron_345m", "model.encoder_layers=2", "model.encoder_embed_dim=64",
                 "model.encoder_ffn_embed_dim=128", "model.encoder_attention_heads=2"]  # fmt: skip


@pytest.fixture(scope="session")
def megatron(data_bin, tmp_path_factory):
    """checkpoint_last.pt of the tiny megatron, pretrained for a few updates on the PubMed slice."""
    return build_once(tmp_path_factory, "tiny-megatron",
                      lambda save_dir: _pretrain_tiny(data_bin, save_dir, size=MEGATRON_SIZE, updates=20))  # fmt: skip


@pytest.fixture(scope="session")
def megatron_tagger(megatron, ncbi_slice, tmp_path_factory):
    """save_dir of the tiny megatron fine-tuned on the NCBI slice for a few updates."""
    return build_once(tmp_path_factory, "megatron-ner", lambda save_dir: fine_tune(
        ncbi_slice, save_dir, f"checkpoint.restore_file={megatron}", updates=10).parent)  # fmt: skip


def test_pretraining_records_the_megatron_architecture(megatron):
    state = compat.load_checkpoint(megatron)
    model = state["cfg"]["model"]
    assert model["_name"] == "bio_megatron_345m"
    weights = state["model"]
    assert "encoder.sentence_encoder.layer_norm.weight" in weights  # the final LayerNorm
    assert not any("layernorm_embedding" in key for key in weights)  # no embedding LayerNorm


def test_fine_tuned_tagger_keeps_the_megatron_layout_and_predicts(megatron, megatron_tagger, ncbi_slice, tmp_path):
    state = compat.load_checkpoint(megatron_tagger / "checkpoint_last.pt")
    encoder = compat.load_checkpoint(megatron)["model"]
    assert state["cfg"]["model"]["encoder_normalize_before"] and not state["cfg"]["model"]["layernorm_embedding"]
    assert state["model"]["encoder.sentence_encoder.layer_norm.weight"].shape == (64,)
    assert not torch.equal(state["model"]["encoder.sentence_encoder.layers.0.fc1.weight"],
                           encoder["encoder.sentence_encoder.layers.0.fc1.weight"])  # fmt: skip  (it trained)
    out = tmp_path / "pred.tsv"
    run_cli(["fairseq-bio-predict", "--checkpoint", megatron_tagger / "checkpoint_last.pt", "--input",
             ncbi_slice / "test.tsv", "--output", out], cwd=tmp_path)  # fmt: skip
    gold = (ncbi_slice / "test.tsv").read_text(encoding="utf-8").splitlines()
    predicted = out.read_text(encoding="utf-8").splitlines()
    assert len(predicted) == len(gold)
    assert all(p.split("\t")[2] in ("O", "B-Disease", "I-Disease") for p in predicted if p)


def test_distillation_teacher_and_init_student(megatron, tmp_path):
    from fairseq_bio.cli.init_student import init_student
    from fairseq_bio.criterions.bio_distillation import load_teacher

    teacher, _ = load_teacher(str(megatron))
    encoder = teacher.encoder.sentence_encoder
    assert encoder.layer_norm is not None and encoder.layernorm_embedding is None and len(encoder.layers) == 2

    info = init_student(megatron, tmp_path / "student" / "init.pt", layers="1")
    assert info["layers"] == [1]
    assert info["options"]["encoder_normalize_before"] and not info["options"]["layernorm_embedding"]
    student = compat.load_checkpoint(tmp_path / "student" / "init.pt")["model"]
    weights = compat.load_checkpoint(megatron)["model"]
    for key in ("layers.1.fc1.weight", "layer_norm.weight", "embed_tokens.weight"):
        source = weights[f"encoder.sentence_encoder.{key}"]
        assert torch.equal(student[f"encoder.sentence_encoder.{key.replace('layers.1', 'layers.0')}"], source)


def test_extract_encoder_says_a_megatron_is_already_an_encoder(megatron, tmp_path):
    result = run_cli(["fairseq-bio-extract-encoder", megatron, tmp_path / "enc.pt"], cwd=tmp_path, check=False)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode != 0 and "already a bio_roberta encoder checkpoint" in last
    assert last.startswith("fairseq-bio-extract-encoder: ") and not (tmp_path / "enc.pt").exists()
