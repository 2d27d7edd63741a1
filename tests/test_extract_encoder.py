"""fairseq-bio-extract-encoder: the ELECTRA discriminator (or a full-width generator) as a
bio_roberta encoder checkpoint with identical features, its vocabulary beside it, one-line refusals,
and tagging fine-tunes from it."""

import pytest
import torch
from conftest import fine_tune, logged, run_cli

from fairseq_bio import runs
from fairseq_bio.cli.extract_encoder import extract_encoder
from fairseq_bio.errors import BioError
from fairseq_bio.files import InputError

SMALL = [
    "model.encoder_layers=2",
    "model.encoder_embed_dim=64",
    "model.encoder_ffn_embed_dim=128",
    "model.encoder_attention_heads=2",
    "model.generator_ffn_embed_dim=64",
    "model.generator_attention_heads=1",
    "optimization.max_update=10",
    "dataset.disable_validation=true",
    "common.tensorboard_logdir=null",
    "checkpoint.save_interval_updates=100000",
]


def electra_checkpoint(data, save_dir, generator_dim):
    run_cli(
        runs.hydra_train(
            "bio_electra_tiny",
            f"task.data={data}",
            f"model.generator_embed_dim={generator_dim}",
            *SMALL,
            save_dir=save_dir,
        ),
        cwd=save_dir.parent,
    )
    return save_dir / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def electra_ckpts(data_bin, tmp_path_factory):
    """(data-bin, a checkpoint with a 32-wide projected generator, one with a 64-wide =
    embedding-wide one)."""
    data = data_bin("bytebpe")
    work = tmp_path_factory.mktemp("extract")
    return (
        data,
        electra_checkpoint(data, work / "narrow", 32),
        electra_checkpoint(data, work / "wide", 64),
    )


def load_electra(path):
    from fairseq import checkpoint_utils

    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(path)])
    return models[0].eval(), task


def load_encoder(path):
    from fairseq_bio.models.bio_roberta import BioRobertaModel

    hub = BioRobertaModel.from_pretrained(str(path.parent), path.name, data_name_or_path=".")
    return hub.eval()


SENTENCE = "Aspirin reduces the risk of myocardial infarction in patients with diabetes."


def test_discriminator_is_a_bio_roberta_encoder_with_identical_features(electra_ckpts, tmp_path):
    data, narrow, _ = electra_ckpts
    out = tmp_path / "disc" / "discriminator.pt"
    result = run_cli(
        ["fairseq-bio-extract-encoder", "--checkpoint", narrow, "--out", out], cwd=tmp_path
    )
    assert "the discriminator as a bio_roberta encoder" in result.stdout
    assert (out.parent / "dict.txt").read_bytes() == (data / "dict.txt").read_bytes()
    assert (out.parent / "bpe.json").exists()
    assert [p.name for p in out.parent.glob(".*")] == [
        ".fairseq_bio-made.json"
    ]  # its record; no temp files left
    state = torch.load(out, weights_only=True)
    assert (
        state["cfg"]["model"]["_name"] == "bio_roberta"
        and state["cfg"]["model"]["encoder_embed_dim"] == 64
    )

    electra, _ = load_electra(narrow)
    hub = load_encoder(out)
    tokens = hub.encode(SENTENCE).unsqueeze(0)
    with torch.no_grad():
        expected = electra.discriminator(tokens)["encoder_out"][0].transpose(0, 1)
        features = hub.model.encoder.extract_features(tokens)[0]
    assert torch.equal(features, expected)

    # The generator behind a projection does not fit bio_roberta: refused in one line, nothing
    # written.
    refused = run_cli(
        [
            "fairseq-bio-extract-encoder",
            "--checkpoint",
            narrow,
            "--out",
            tmp_path / "g.pt",
            "--part",
            "generator",
        ],
        cwd=tmp_path,
        check=False,
    )
    last = refused.stderr.strip().splitlines()[-1]  # (fairseq's own import chatter comes before it)
    assert (
        refused.returncode == 1
        and last.startswith("fairseq-bio-extract-encoder: ")
        and "cannot hold" in last
    )
    assert "Traceback" not in refused.stderr
    assert not (tmp_path / "g.pt").exists()
    with pytest.raises(InputError, match="already exists; pass --overwrite to replace it"):
        extract_encoder(narrow, out)
    with pytest.raises(BioError, match="already a bio_roberta encoder checkpoint"):
        extract_encoder(out, tmp_path / "again.pt")


def test_an_earlier_best_checkpoint_is_extracted_with_a_note(electra_ckpts, tmp_path):
    """fairseq picks ELECTRA's checkpoint_best.pt by the summed validation loss, which rises as the
    generator learns (a tiny run here: update 133 of 1,070): extracting it says so in one line and
    names checkpoint_last.pt.
    """
    from fairseq_bio.checkpoints import load_checkpoint

    _, narrow, _ = electra_ckpts
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    state = load_checkpoint(narrow)
    assert state["optimizer_history"][-1]["num_updates"] == 10
    torch.save(state, run_dir / "checkpoint_last.pt")
    state["optimizer_history"][-1]["num_updates"] = 3
    torch.save(state, run_dir / "checkpoint_best.pt")
    result = run_cli(
        [
            "fairseq-bio-extract-encoder",
            "--checkpoint",
            run_dir / "checkpoint_best.pt",
            "--out",
            tmp_path / "best.pt",
        ],
        cwd=tmp_path,
    )
    note = [
        line
        for line in result.stderr.splitlines()
        if line.startswith("fairseq-bio-extract-encoder: note: ")
    ]
    assert note == [
        f"fairseq-bio-extract-encoder: note: {run_dir / 'checkpoint_best.pt'} is update 3, "
        "checkpoint_last.pt beside it update 10: fairseq picks ELECTRA's best by the summed validation "
        "loss, which rises while the generator learns; the trained discriminator is in "
        "checkpoint_last.pt"
    ]
    assert (tmp_path / "best.pt").is_file()  # extracted all the same: the user may want it
    assert extract_encoder(run_dir / "checkpoint_last.pt", tmp_path / "last.pt")["note"] is None
    state["optimizer_history"][-1]["num_updates"] = 10  # best == last: nothing to say
    torch.save(state, run_dir / "checkpoint_best.pt")
    assert extract_encoder(run_dir / "checkpoint_best.pt", tmp_path / "best10.pt")["note"] is None


def test_full_width_generator_keeps_its_mlm_head(electra_ckpts, tmp_path):
    _, _, wide = electra_ckpts
    out = tmp_path / "generator.pt"
    info = extract_encoder(wide, out, part="generator")
    assert info["lm_head"] == "generator"
    electra, _ = load_electra(wide)
    hub = load_encoder(out)
    tokens = hub.encode(SENTENCE).unsqueeze(0)
    masked = torch.zeros_like(tokens, dtype=torch.bool)
    masked[0, 3] = True
    with torch.no_grad():
        expected = electra.generator_logits(tokens, masked)
        logits = hub.model(tokens)[0][masked]
    assert torch.allclose(logits, expected, atol=1e-5)


def test_tagging_fine_tunes_from_the_extracted_discriminator(electra_ckpts, ncbi_slice, tmp_path):
    _, narrow, _ = electra_ckpts
    # Pointed at the ELECTRA checkpoint itself, fine-tuning stops with what to run.
    refused = run_cli(
        runs.hydra_train(
            "bio_tagging_ner",
            f"task.data={ncbi_slice}",
            f"checkpoint.restore_file={narrow}",
            save_dir=tmp_path / "x",
        ),
        cwd=tmp_path,
        check=False,
    )
    assert refused.returncode != 0 and "fairseq-bio-extract-encoder" in refused.stderr

    encoder = tmp_path / "enc" / "discriminator.pt"
    extract_encoder(narrow, encoder)
    (tmp_path / "ner").mkdir()
    log = fine_tune(ncbi_slice, tmp_path / "ner", f"checkpoint.restore_file={encoder}", updates=30)
    valid = logged(log, "valid")
    assert valid and all("f1" in entry for entry in valid.values())
    assert (tmp_path / "ner" / "checkpoint_best.pt").exists()
