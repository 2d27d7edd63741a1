"""BioMegatron-shaped checkpoints downstream: a tiny ``bio_megatron_345m`` (pre-LayerNorm, no
embedding LayerNorm, final LayerNorm; 2 x 64 here) pretrained with fairseq-hydra-train records
``model._name=bio_megatron_345m``, and every consumer of a bio_roberta checkpoint takes it: NER
fine-tuning and fairseq-bio-predict, the distillation teacher, fairseq-bio-init-student,
fairseq-bio-export-hf (as HF MegatronBert, checked against transformers); an HF MegatronBert imports
exactly (1e-4) as such a checkpoint."""

import os

import pytest
import torch
from conftest import _pretrain_tiny, build_once, fine_tune, run_cli

from fairseq_bio import checkpoints

os.environ["HF_HUB_OFFLINE"] = "1"
TOL = 1e-4
MEGATRON_SIZE = [
    "model._name=bio_megatron_345m",
    "model.encoder_layers=2",
    "model.encoder_embed_dim=64",
    "model.encoder_ffn_embed_dim=128",
    "model.encoder_attention_heads=2",
]


@pytest.fixture(scope="session")
def megatron(data_bin, tmp_path_factory):
    """checkpoint_last.pt of the tiny megatron, pretrained for a few updates on the PubMed slice."""
    return build_once(
        tmp_path_factory,
        "tiny-megatron",
        lambda save_dir: _pretrain_tiny(data_bin, save_dir, size=MEGATRON_SIZE, updates=20),
    )


@pytest.fixture(scope="session")
def megatron_tagger(megatron, ncbi_slice, tmp_path_factory):
    """save_dir of the tiny megatron fine-tuned on the NCBI slice for a few updates."""
    return build_once(
        tmp_path_factory,
        "megatron-ner",
        lambda save_dir: fine_tune(
            ncbi_slice, save_dir, f"checkpoint.restore_file={megatron}", updates=10
        ).parent,
    )


def test_pretraining_records_the_megatron_architecture(megatron):
    state = checkpoints.load_checkpoint(megatron)
    model = state["cfg"]["model"]
    assert model["_name"] == "bio_megatron_345m"
    weights = state["model"]
    assert "encoder.sentence_encoder.layer_norm.weight" in weights  # the final LayerNorm
    assert not any("layernorm_embedding" in key for key in weights)  # no embedding LayerNorm


def test_fine_tuned_tagger_keeps_the_megatron_layout_and_predicts(
    megatron, megatron_tagger, ncbi_slice, tmp_path
):
    state = checkpoints.load_checkpoint(megatron_tagger / "checkpoint_last.pt")
    encoder = checkpoints.load_checkpoint(megatron)["model"]
    assert (
        state["cfg"]["model"]["encoder_normalize_before"]
        and not state["cfg"]["model"]["layernorm_embedding"]
    )
    assert state["model"]["encoder.sentence_encoder.layer_norm.weight"].shape == (64,)
    assert not torch.equal(
        state["model"]["encoder.sentence_encoder.layers.0.fc1.weight"],
        encoder["encoder.sentence_encoder.layers.0.fc1.weight"],
    )  # fmt: skip  (it trained)
    out = tmp_path / "pred.tsv"
    run_cli(
        [
            "fairseq-bio-predict",
            "--checkpoint",
            megatron_tagger / "checkpoint_last.pt",
            "--input",
            ncbi_slice / "test.tsv",
            "--out",
            out,
        ],
        cwd=tmp_path,
    )
    gold = (ncbi_slice / "test.tsv").read_text(encoding="utf-8").splitlines()
    predicted = out.read_text(encoding="utf-8").splitlines()
    assert len(predicted) == len(gold)
    assert all(p.split("\t")[2] in ("O", "B-Disease", "I-Disease") for p in predicted if p)


def test_distillation_teacher_and_init_student(megatron, tmp_path):
    from fairseq_bio.cli.init_student import init_student
    from fairseq_bio.criterions.bio_distillation import load_teacher

    teacher, _ = load_teacher(str(megatron))
    encoder = teacher.encoder.sentence_encoder
    assert (
        encoder.layer_norm is not None
        and encoder.layernorm_embedding is None
        and len(encoder.layers) == 2
    )

    info = init_student(megatron, tmp_path / "student" / "init.pt", layers="1")
    assert info["layers"] == [1]
    assert (
        info["options"]["encoder_normalize_before"] and not info["options"]["layernorm_embedding"]
    )
    student = checkpoints.load_checkpoint(tmp_path / "student" / "init.pt")["model"]
    weights = checkpoints.load_checkpoint(megatron)["model"]
    for key in ("layers.1.fc1.weight", "layer_norm.weight", "embed_tokens.weight"):
        source = weights[f"encoder.sentence_encoder.{key}"]
        assert torch.equal(
            student[f"encoder.sentence_encoder.{key.replace('layers.1', 'layers.0')}"], source
        )


def test_extract_encoder_says_a_megatron_is_already_an_encoder(megatron, tmp_path):
    result = run_cli(
        ["fairseq-bio-extract-encoder", "--checkpoint", megatron, "--out", tmp_path / "enc.pt"],
        cwd=tmp_path,
        check=False,
    )
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode != 0 and "already a bio_roberta encoder checkpoint" in last
    assert last.startswith("fairseq-bio-extract-encoder: ") and not (tmp_path / "enc.pt").exists()


# ------------------------------------------------------------------------------------------------ HF interop


def test_hf_megatron_bert_imports_exactly_and_exports_back(learned_vocab, pubmed_corpus, tmp_path):
    """A random tiny HF MegatronBertForMaskedLM (WordPiece learned on PubMed): the import is a
    pre-LN bio_roberta without an embedding LayerNorm whose every layer's states and MLM logits
    equal HF's on real sentences, batched with padding; exporting it gives back a
    MegatronBertForMaskedLM with HF's logits."""
    transformers = pytest.importorskip("transformers")
    from helpers.hf_models import BERT_SPECIALS, check_logits, real_sentences, save_tiny_bert

    from fairseq_bio.hf import export_hf, import_hf

    hf = save_tiny_bert(
        tmp_path / "hf", learned_vocab("wordpiece"), cls_name="MegatronBertForMaskedLM"
    )
    info = import_hf(hf, tmp_path / "imported", log=lambda line: None)
    assert info["model_type"] == "megatron-bert" and info["mlm_head"] == "imported"
    assert info["model"]["encoder_normalize_before"] and not info["model"]["layernorm_embedding"]
    assert "++model.encoder_normalize_before=true" in info["hydra_overrides"]
    assert (
        info["check"]["logits_max_abs_diff"] <= TOL and info["check"]["hidden_max_abs_diff"] <= TOL
    )
    sentences = real_sentences(pubmed_corpus, 24)
    worst = check_logits(hf, tmp_path / "imported", sentences, BERT_SPECIALS)
    print(
        f"MegatronBERT import: MLM logits max |diff| {worst:.2e} (import's own check "
        f"{info['check']['logits_max_abs_diff']:.2e})"
    )

    result = export_hf(tmp_path / "imported" / "model.pt", tmp_path / "exported")
    assert (
        result["architecture"] == "MegatronBertForMaskedLM" and result["logits_max_abs_diff"] <= TOL
    )
    models, encoded = {}, {}
    for name, directory in (("original", hf), ("exported", tmp_path / "exported")):
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory))
        models[name] = (
            tokenizer,
            transformers.AutoModelForMaskedLM.from_pretrained(str(directory)).eval(),
        )
        encoded[name] = tokenizer(sentences, padding=True, return_tensors="pt")
    (original_tokenizer, original), (exported_tokenizer, exported) = (
        models["original"],
        models["exported"],
    )
    # the export's ids are fairseq's ([CLS] [PAD] [SEP] [UNK] first, [MASK] last): the same tokens
    # by name
    to_original = torch.tensor(
        original_tokenizer.convert_tokens_to_ids(
            exported_tokenizer.convert_ids_to_tokens(list(range(len(exported_tokenizer))))
        )
    )
    assert torch.equal(
        to_original[encoded["exported"]["input_ids"]], encoded["original"]["input_ids"]
    )
    with torch.no_grad():
        a, b = original(**encoded["original"]).logits, exported(**encoded["exported"]).logits
    mask = encoded["original"]["attention_mask"].bool()
    round_trip = (a[mask][:, to_original] - b[mask]).abs().max().item()
    print(
        f"MegatronBERT import -> export: MLM logits max |diff| from the original {round_trip:.2e}"
    )
    assert round_trip <= TOL


def test_megatron_lm_conversion_with_padded_vocabulary_imports(learned_vocab, tmp_path):
    """What transformers' convert_megatron_bert_checkpoint.py writes from a Megatron-LM BERT
    checkpoint (the continue-the-1.2b recipe): config.json and pytorch_model.bin with Megatron-LM's
    vocabulary padding rows, its pooler and next-sentence head, no tokenizer (BERT's vocab.txt put
    beside it): imported with the padding, pooler and next-sentence head left out and said, MLM
    logits of every real token within 1e-4 of HF's."""
    import json

    from helpers.hf_models import save_tiny_bert
    from safetensors.torch import load_file

    from fairseq_bio.hf import import_hf

    hf = save_tiny_bert(
        tmp_path / "hf", learned_vocab("wordpiece"), cls_name="MegatronBertForMaskedLM"
    )
    state, g = load_file(str(hf / "model.safetensors")), torch.Generator().manual_seed(5)
    rows = state["bert.embeddings.word_embeddings.weight"].size(0)
    padded = rows + 64  # Megatron-LM pads to a multiple of 128
    state["bert.embeddings.word_embeddings.weight"] = torch.cat(
        [state["bert.embeddings.word_embeddings.weight"], torch.randn(64, 32, generator=g)]
    )
    state["cls.predictions.bias"] = torch.cat(
        [state["cls.predictions.bias"], torch.randn(64, generator=g)]
    )
    state.update(
        {
            "bert.pooler.dense.weight": torch.randn(32, 32, generator=g),
            "bert.pooler.dense.bias": torch.zeros(32),
            "cls.seq_relationship.weight": torch.randn(2, 32, generator=g),
            "cls.seq_relationship.bias": torch.zeros(2),
        }
    )
    torch.save(state, hf / "pytorch_model.bin")
    for name in ("model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        (hf / name).unlink(missing_ok=True)
    config = json.loads((hf / "config.json").read_text())
    (hf / "config.json").write_text(json.dumps({**config, "vocab_size": padded}))

    info = import_hf(hf, tmp_path / "imported", log=lambda line: None)
    assert info["vocabulary"]["size"] == rows and info["mlm_head"] == "imported"
    assert f"64 vocabulary padding rows (ids {rows}-{padded - 1}: no token)" in info["dropped"]
    assert any("pooler" in what for what in info["dropped"]) and any(
        "next-sentence" in w for w in info["dropped"]
    )
    assert (
        info["check"]["logits_max_abs_diff"] <= TOL and info["check"]["hidden_max_abs_diff"] <= TOL
    )


def test_megatron_masked_lm_exports_as_megatron_bert(megatron, data_bin, pubmed_corpus, tmp_path):
    from helpers.checkpoints import save_with
    from helpers.hf_models import check_against_hf, randomise, real_sentences

    from fairseq_bio.hf import export_hf

    checkpoint = save_with(
        megatron,
        tmp_path / "random" / "checkpoint_last.pt",
        lambda state: state.update(model=randomise(state["model"])),
    )
    data = data_bin("bytebpe")
    result = export_hf(checkpoint, tmp_path / "hf", data=str(data))
    assert (
        result["architecture"] == "MegatronBertForMaskedLM" and result["logits_max_abs_diff"] <= TOL
    )
    diff, _, model = check_against_hf(
        tmp_path / "hf", checkpoint, data, real_sentences(pubmed_corpus, 24)
    )
    print(
        f"MegatronBERT export: logits max |diff| {diff:.2e} (the export's own check "
        f"{result['logits_max_abs_diff']:.2e})"
    )
    assert diff <= TOL and type(model).__name__ == "MegatronBertForMaskedLM"
    card = (tmp_path / "hf" / "README.md").read_text()
    assert (
        "no embedding LayerNorm" in card
        and f"{model.config.max_position_embeddings} positions" in card
    )


def test_megatron_tagger_exports_as_megatron_bert_token_classification(megatron_tagger, tmp_path):
    from fairseq_bio.hf import export_hf

    result = export_hf(megatron_tagger / "checkpoint_last.pt", tmp_path / "hf")
    assert (
        result["architecture"] == "MegatronBertForTokenClassification"
        and result["logits_max_abs_diff"] <= TOL
    )


def test_sentence_and_qa_fine_tuning_from_megatron_export_as_megatron_bert(megatron, tmp_path):
    """bio_sentence_prediction (BIOSSES pairs, regression) and bio_extractive_qa fine-tune from the
    megatron checkpoint (5 updates each) and export as MegatronBertForSequenceClassification (the
    sentence head's dense is the pooler) and MegatronBertForQuestionAnswering, each checked by the
    export against transformers; HF's tokenizer(a, b) output runs the classifier as it is (one token
    type)."""
    transformers = pytest.importorskip("transformers")
    from conftest import SHARED_DATA, fine_tune_sentence
    from helpers.qa import fine_tune_qa

    from fairseq_bio.hf import export_hf

    fine_tune_sentence(
        "biosses",
        SHARED_DATA / "biosses",
        tmp_path / "biosses",
        f"checkpoint.restore_file={megatron}",
        updates=5,
    )
    result = export_hf(tmp_path / "biosses" / "checkpoint_last.pt", tmp_path / "hf-biosses")
    assert (
        result["architecture"] == "MegatronBertForSequenceClassification" and result["pairs"] == 2
    )
    assert result["logits_max_abs_diff"] <= TOL
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf-biosses"))
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        str(tmp_path / "hf-biosses")
    ).eval()
    encoded = tokenizer("Aspirin lowers fever.", "Fever falls after aspirin.", return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(model(**encoded).logits, model(encoded["input_ids"]).logits)

    fine_tune_qa(megatron, tmp_path / "qa", updates=5)
    result = export_hf(tmp_path / "qa" / "checkpoint_last.pt", tmp_path / "hf-qa")
    assert (
        result["architecture"] == "MegatronBertForQuestionAnswering"
        and result["logits_max_abs_diff"] <= TOL
    )
