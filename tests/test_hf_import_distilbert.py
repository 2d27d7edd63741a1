"""fairseq-bio-import-hf on tiny HF DistilBERT models built here (BioDistilBERT continues
DistilBERT): every layer's states and the MLM logits equal HF's on real PubMed sentences, HF ids map
one to one onto fairseq's, the import loads as a bio_roberta checkpoint; MobileBERT is refused in
one line with nothing written."""

import json
import shutil

import pytest
import torch
from helpers.hf_models import (
    BERT_SPECIALS,
    TOL,
    fairseq_ids_of_hf_tokens,
    hf_and_fairseq_outputs,
    real_sentences,
    save_tiny_distilbert,
)

from fairseq_bio import checkpoints
from fairseq_bio.cli.import_hf import cli_main
from fairseq_bio.models.bio_roberta import BioRobertaModel

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tiny_distilbert(learned_vocab, tmp_path_factory):
    return save_tiny_distilbert(
        tmp_path_factory.mktemp("tiny-distilbert") / "hf", learned_vocab("wordpiece")
    )


def import_with_the_command(hf_dir, out, capsys):
    """``fairseq-bio-import-hf hf_dir out`` (its own check against HF included); (import_info,
    printed lines)."""
    cli_main(["--checkpoint", str(hf_dir), "--out", str(out)])
    return (
        json.loads((out / "import_info.json").read_text()),
        capsys.readouterr().out.strip().splitlines(),
    )


def compare_on_pubmed(hf_dir, out, sentences, logits=True):
    """Largest |difference| of every layer's states and of the MLM logits between HF and the import,
    batched with padding, after checking that HF ids map one to one onto fairseq ids (looked up by
    symbol)."""
    hub = BioRobertaModel.from_pretrained(str(out), "model.pt").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(hf_dir))
    auto = transformers.AutoModelForMaskedLM if logits else transformers.AutoModel
    model = auto.from_pretrained(str(hf_dir)).eval()
    tokens = tokenizer.convert_ids_to_tokens(range(len(tokenizer)))
    hf_to_fs = torch.tensor(
        fairseq_ids_of_hf_tokens(hub.task.source_dictionary, tokens, BERT_SPECIALS)
    )
    assert (
        sorted(hf_to_fs.tolist())
        == list(range(len(hub.task.source_dictionary)))
        == list(range(len(tokens)))
    )
    hf_embed = model.get_input_embeddings().weight
    assert torch.equal(hub.model.encoder.sentence_encoder.embed_tokens.weight[hf_to_fs], hf_embed)
    worst_states, worst_logits = 0.0, 0.0
    for hf_states, fs_states, out_logits in hf_and_fairseq_outputs(
        model, tokenizer, hub, sentences, hf_to_fs, logits
    ):
        assert len(hf_states) == len(fs_states) == 3  # embeddings + two layers
        worst_states = max(
            worst_states, max((a - b).abs().max().item() for a, b in zip(hf_states, fs_states))
        )
        if logits:
            worst_logits = max(worst_logits, (out_logits[0] - out_logits[1]).abs().max().item())
    print(
        f"max |diff| over {len(sentences)} PubMed sentences: states {worst_states:.2e}, logits {worst_logits:.2e}"
    )
    return worst_states, worst_logits


def test_distilbert_for_masked_lm_imports_exactly(tiny_distilbert, pubmed_corpus, tmp_path, capsys):
    out = tmp_path / "imported"
    info, lines = import_with_the_command(tiny_distilbert, out, capsys)
    assert (
        lines[1]
        == f"wrote {out}/model.pt (distilbert, wordpiece vocabulary of 3000, MLM head imported)"
    )
    assert (
        info["model_type"] == "distilbert"
        and info["mlm_head"] == "imported"
        and info["dropped"] == []
    )
    assert info["model"]["layer_norm_eps"] == 1e-12 and info["model"]["activation_fn"] == "gelu"
    assert not info["model"]["untie_weights_roberta"] and info["model"]["max_positions"] == 512
    assert (
        info["check"]["hidden_max_abs_diff"] <= TOL and info["check"]["logits_max_abs_diff"] <= TOL
    )
    corpus = real_sentences(pubmed_corpus, 3000)
    sentences = (
        corpus[:16] + [s for s in corpus if not s.isascii()][:8]
    )  # accents: lower-cased and stripped
    assert len(sentences) == 24
    states, logits = compare_on_pubmed(tiny_distilbert, out, sentences)
    assert states <= TOL and logits <= TOL
    # What continued pretraining and fine-tuning restore: the checkpoint loads as bio_roberta with
    # the options the command printed, and its MLM head trains.
    hub = BioRobertaModel.from_pretrained(str(out), "model.pt")
    assert "++model.layer_norm_eps=1e-12" in lines[2] and "++model.encoder_layers=2" in lines[2]
    model_cfg = hub.cfg.model
    assert (model_cfg.encoder_layers, model_cfg.encoder_embed_dim, model_cfg.layer_norm_eps) == (
        2,
        32,
        1e-12,
    )
    hub.model.train()
    tokens = hub.encode(sentences[0])[None]
    hub.model(tokens)[0].logsumexp(-1).mean().backward()
    assert hub.model.encoder.lm_head.dense.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("variant", ["relu, sinusoidal positions, untied", "sequence classifier"])
def test_distilbert_variants(variant, learned_vocab, pubmed_corpus, tmp_path, capsys):
    """DistilBERT's other settings (its head applies the encoder's activation, so relu is exact in
    bio_roberta; the sinusoidal table is stored weights, copied as learned positions) and a
    fine-tuned DistilBERT without MLM head.
    """
    vocab = learned_vocab("wordpiece")
    if variant == "sequence classifier":
        hf = save_tiny_distilbert(
            tmp_path / "hf", vocab, cls_name="DistilBertForSequenceClassification"
        )
    else:
        hf = save_tiny_distilbert(
            tmp_path / "hf",
            vocab,
            activation="relu",
            sinusoidal_pos_embds=True,
            tie_word_embeddings=False,
        )
    out = tmp_path / "imported"
    info, lines = import_with_the_command(hf, out, capsys)
    head = variant != "sequence classifier"
    assert info["mlm_head"] == ("imported" if head else "initialised")
    assert info["dropped"] == ([] if head else ["classification head"])
    assert info["model"]["activation_fn"] == ("relu" if head else "gelu")
    assert info["model"]["untie_weights_roberta"] == head
    if (
        head
    ):  # the imported positions are DistilBERT's sinusoids, from row 2 (fairseq counts from padding_idx + 1)
        from safetensors.torch import load_file

        table = load_file(str(hf / "model.safetensors"))[
            "distilbert.embeddings.position_embeddings.weight"
        ]
        assert table[1, 0].item() == pytest.approx(torch.sin(torch.tensor(1.0)).item())
        imported = checkpoints.load_checkpoint(out / "model.pt")["model"]
        assert torch.equal(imported["encoder.sentence_encoder.embed_positions.weight"][2:], table)
    states, logits = compare_on_pubmed(
        hf, out, real_sentences(pubmed_corpus, 16, start=100), logits=head
    )
    assert states <= TOL and logits <= TOL


def _expect_refusal(hf, tmp_path, message):
    out = tmp_path / "out" / "imported"
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["--checkpoint", str(hf), "--out", str(out)])
    error = str(exit_info.value.code)
    assert error.startswith("fairseq-bio-import-hf: ") and "\n" not in error and message in error
    assert not (tmp_path / "out").exists()  # nothing written, not even a temp dir


def test_distilbert_config_errors_name_distilbert_fields(tiny_distilbert, tmp_path):
    hf = tmp_path / "hf"
    shutil.copytree(tiny_distilbert, hf)
    config = json.loads((hf / "config.json").read_text())
    (hf / "config.json").write_text(json.dumps({**config, "n_heads": 5}))
    _expect_refusal(hf, tmp_path, 'config.json: field "n_heads": does not divide dim')


def test_mobilebert_is_refused_in_one_line(learned_vocab, tmp_path):
    """MobileBERT's bottlenecks, NoNorm, stacked FFNs and 3-gram embeddings have no place in
    bio_roberta."""
    hf = tmp_path / "hf"
    tokenizer = transformers.MobileBertTokenizer(
        vocab=str(learned_vocab("wordpiece") / "vocab.txt")
    )
    config = transformers.MobileBertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=32,
        embedding_size=16,
        intra_bottleneck_size=16,
    )
    transformers.MobileBertForMaskedLM(config).save_pretrained(hf)
    tokenizer.save_pretrained(hf)
    _expect_refusal(
        hf, tmp_path, "field \"model_type\": 'mobilebert': MobileBERT's bottleneck projections"
    )
