"""fairseq-bio-export-hf: bio_roberta masked LMs (byte-level BPE and WordPiece vocabularies learned on PubMed,
post-LN and pre-LN) load offline with transformers' Auto classes and give fairseq's token ids and logits on real
PubMed sentences; import(export(m)) is m; what cannot be exported exactly is refused with nothing written."""

import json
import os
from pathlib import Path

import pytest
import torch
from conftest import REPO, run_cli

from fairseq_bio import compat
from fairseq_bio.cli.export_hf import cli_main, export_hf
from fairseq_bio.cli.hf_convert import build_model, encoder_checkpoint, encoder_checkpoint_cfg
from fairseq_bio.cli.import_hf import import_hf
from fairseq_bio.models.bio_roberta import BioRobertaModel

os.environ["HF_HUB_OFFLINE"] = "1"
transformers = pytest.importorskip("transformers")
TOL = 1e-4
SMALL = dict(encoder_layers=2, encoder_embed_dim=32, encoder_ffn_embed_dim=64, encoder_attention_heads=4,
             max_positions=256)  # fmt: skip


def real_sentences(corpus, n, start=0):
    lines = [line.strip() for line in open(corpus / "train.txt", encoding="utf-8") if line.strip()]
    return lines[start : start + n]


def randomise(state, seed=0):
    """Every floating tensor of a state dict at random values (LayerNorms around 1), so a swapped map shows."""
    g = torch.Generator().manual_seed(seed)
    seen = {}
    for name, tensor in state.items():
        if tensor.is_floating_point() and not name.endswith(".version"):  # fairseq's format version stays
            if tensor.data_ptr() in seen:  # tied tensors stay tied
                state[name] = state[seen[tensor.data_ptr()]]
                continue
            seen[tensor.data_ptr()] = name
            base = 1.0 if "layer_norm" in name or "layernorm" in name else 0.0
            state[name] = base + 0.2 * torch.randn(tensor.shape, generator=g)
    return state


def make_checkpoint(data_dir, path, seed=0, **options):
    """A bio_roberta encoder checkpoint over ``data_dir``'s vocabulary with random weights."""
    cfg = encoder_checkpoint_cfg(str(data_dir), {**SMALL, **options}, tokens_per_sample=128)
    torch.manual_seed(seed)
    _, model = build_model(cfg, str(data_dir))
    model.load_state_dict(randomise(model.state_dict(), seed))
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(encoder_checkpoint(cfg, model.state_dict(), {}), path)
    return path


def check_against_hf(hf_dir, checkpoint, data_dir, sentences):
    """Independently of the command's own check: HF (offline Auto classes) vs fairseq, padded batch."""
    hub = BioRobertaModel.from_pretrained(str(checkpoint.parent), checkpoint.name, data_name_or_path=str(data_dir))
    hub.eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(hf_dir))
    model = transformers.AutoModelForMaskedLM.from_pretrained(str(hf_dir)).eval()
    encoded = tokenizer(sentences, padding=True, return_tensors="pt")
    fs_tokens = [hub.encode(s) for s in sentences]
    batch = torch.full(encoded["input_ids"].shape, hub.task.source_dictionary.pad())
    for row, tokens in enumerate(fs_tokens):
        batch[row, : len(tokens)] = tokens
    assert torch.equal(batch, encoded["input_ids"])  # the same ids, padding included
    with torch.no_grad():
        hf_logits = model(**encoded).logits
        fs_logits = hub.model(batch)[0]
    mask = encoded["attention_mask"].bool()
    return (hf_logits[mask] - fs_logits[mask]).abs().max().item(), tokenizer, model


@pytest.fixture(scope="module")
def trained_bytebpe(data_bin, tmp_path_factory):
    """A checkpoint written by fairseq-hydra-train (3 updates) on the byte-BPE data, then given random weights."""
    data = data_bin("bytebpe")
    work = tmp_path_factory.mktemp("trained")
    run_cli(
        ["fairseq-hydra-train", "--config-dir", REPO / "hydra_configs", "--config-name", "bio_roberta_tiny",
         f"task.data={data}", f"common.user_dir={REPO / 'fairseq_bio'}", f"checkpoint.save_dir={work / 'ckpt'}",
         "model.encoder_layers=2", "model.encoder_embed_dim=32", "model.encoder_ffn_embed_dim=64",
         "model.encoder_attention_heads=4", "model.max_positions=128", "task.tokens_per_sample=128",
         "optimization.max_update=3", "dataset.disable_validation=true", "checkpoint.save_interval_updates=3",
         "common.tensorboard_logdir=null", "lr_scheduler.warmup_updates=1"],
        cwd=work,
    )  # fmt: skip
    path = work / "ckpt" / "checkpoint_last.pt"
    state = compat.load_checkpoint(path)
    state["model"] = randomise(state["model"])
    torch.save(state, path)
    return path, data


def test_trained_byte_bpe_checkpoint_exports_to_roberta(trained_bytebpe, pubmed_corpus, tmp_path):
    checkpoint, data = trained_bytebpe
    out = tmp_path / "hf"
    result = export_hf(checkpoint, out)  # vocabulary found through the checkpoint's task.data
    assert result["architecture"] == "RobertaForMaskedLM" and result["logits_max_abs_diff"] <= TOL
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json", "merges.txt", "model.safetensors",
                                                     "tokenizer.json", "tokenizer_config.json", "vocab.json"]  # fmt: skip
    diff, tokenizer, model = check_against_hf(out, checkpoint, data, real_sentences(pubmed_corpus, 32))
    assert diff <= TOL
    assert type(model).__name__ == "RobertaForMaskedLM" and "Roberta" in type(tokenizer).__name__
    card = (out / "README.md").read_text()
    for text in ("## Architecture", "2 layers, hidden size 32", "byte-level BPE", f"on `{data}`", "updates: 3",
                 "## Metrics", "token ids and the logits differ from fairseq's by at most"):  # fmt: skip
        assert text in card, text
    # fill-mask through HF's own pipeline works on the exported tokenizer's <mask>
    pipe = transformers.pipeline("fill-mask", model=str(out), tokenizer=str(out))
    assert len(pipe("The patient was treated with <mask> for hypertension.", top_k=3)) == 3


@pytest.fixture(scope="module")
def wordpiece_checkpoint(data_bin, tmp_path_factory):
    data = data_bin("wordpiece")
    return make_checkpoint(data, tmp_path_factory.mktemp("wordpiece") / "model.pt"), data


def test_wordpiece_checkpoint_exports_with_a_bert_tokenizer(wordpiece_checkpoint, pubmed_corpus, tmp_path):
    checkpoint, data = wordpiece_checkpoint
    out = tmp_path / "hf"
    result = export_hf(checkpoint, out, data=str(data))
    assert result["tokenizer"] == "BertTokenizer"
    sentences = real_sentences(pubmed_corpus, 32, start=300)
    assert any(not s.isascii() for s in real_sentences(pubmed_corpus, 400)) and any(c.isupper() for c in sentences[0])
    diff, tokenizer, _ = check_against_hf(out, checkpoint, data, sentences)
    assert diff <= TOL and tokenizer.do_lower_case


def test_round_trip_import_of_export_is_the_same_model(wordpiece_checkpoint, trained_bytebpe, pubmed_corpus, tmp_path):
    sentences = real_sentences(pubmed_corpus, 16, start=600)
    for (checkpoint, data), name in ((wordpiece_checkpoint, "wordpiece"), (trained_bytebpe, "bytebpe")):
        hf, back = tmp_path / f"{name}-hf", tmp_path / f"{name}-back"
        export_hf(checkpoint, hf, data=str(data))
        info = import_hf(hf, back, log=lambda line: None)
        assert info["mlm_head"] == "imported"
        original = BioRobertaModel.from_pretrained(str(checkpoint.parent), checkpoint.name, data_name_or_path=str(data))
        again = BioRobertaModel.from_pretrained(str(back), "model.pt")
        before, after = original.model.state_dict(), again.model.state_dict()
        assert set(before) == set(after)
        for key in before:
            assert torch.equal(before[key], after[key]), (name, key)
        original.eval(), again.eval()
        for sentence in sentences:
            tokens = original.encode(sentence)
            assert torch.equal(again.encode(sentence), tokens)
            assert torch.equal(again.model(tokens[None])[0], original.model(tokens[None])[0])


def test_pre_ln_exports_to_roberta_prelayernorm_or_is_refused(data_bin, pubmed_corpus, tmp_path):
    data = data_bin("wordpiece")
    with_norm = make_checkpoint(
        data, tmp_path / "a" / "model.pt", encoder_normalize_before=True, layernorm_embedding=True
    )
    result = export_hf(with_norm, tmp_path / "hf", data=str(data))
    assert result["architecture"] == "RobertaPreLayerNormForMaskedLM"
    diff, _, model = check_against_hf(tmp_path / "hf", with_norm, data, real_sentences(pubmed_corpus, 16, start=900))
    assert diff <= TOL and type(model).__name__ == "RobertaPreLayerNormForMaskedLM"

    without = make_checkpoint(data, tmp_path / "b" / "model.pt", encoder_normalize_before=True)
    with pytest.raises(SystemExit) as exit_info:
        cli_main([str(without), str(tmp_path / "refused"), "--data", str(data)])
    error = str(exit_info.value.code)
    assert error.startswith("fairseq-bio-export-hf: pre-LN model without an embedding LayerNorm") and "\n" not in error
    assert not (tmp_path / "refused").exists()


def test_refusals_leave_nothing(wordpiece_checkpoint, data_bin, tmp_path):
    checkpoint, data = wordpiece_checkpoint
    spm = make_checkpoint(data_bin("sentencepiece"), tmp_path / "spm" / "model.pt")
    moved = compat.load_checkpoint(checkpoint)
    moved["cfg"]["task"]["data"] = str(tmp_path / "gone")
    (tmp_path / "moved").mkdir()
    torch.save(moved, tmp_path / "moved" / "model.pt")
    cases = [
        ([str(tmp_path / "none.pt"), str(tmp_path / "o1")], "none.pt: no such checkpoint"),
        ([str(tmp_path / "moved" / "model.pt"), str(tmp_path / "o2")], "no dict.txt + bpe.json in"),
        ([str(spm), str(tmp_path / "o3"), "--data", str(data_bin("sentencepiece"))],
         'bpe "sentencepiece": HF tokenizers are written for gpt2'),
        ([str(checkpoint), str(tmp_path / "o4"), "--data", str(data), "--tolerance", "-1"],
         "HF's outputs differ from fairseq's"),  # a failed check: nothing that looks complete is left
    ]  # fmt: skip
    for argv, message in cases:
        with pytest.raises(SystemExit) as exit_info:
            cli_main(argv)
        error = str(exit_info.value.code)
        assert error.startswith("fairseq-bio-export-hf: ") and "\n" not in error and message in error, error
        assert not Path(argv[1]).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["moved", "spm"]  # no temp directories left either


def test_command_line(wordpiece_checkpoint, tmp_path, capsys):
    checkpoint, data = wordpiece_checkpoint
    cli_main([str(checkpoint), str(tmp_path / "hf"), "--data", str(data)])
    out = capsys.readouterr().out
    assert out.startswith(f"wrote {tmp_path / 'hf'} (RobertaForMaskedLM, BertTokenizer); checked on 5 real sentences")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["vocab_size"] == len(open(data / "dict.txt").readlines()) + 5 and config["pad_token_id"] == 1
    # The installed console script: a refusal is one line on stderr and exit status 1.
    result = run_cli(["fairseq-bio-export-hf", checkpoint, tmp_path / "hf"], cwd=tmp_path, check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"fairseq-bio-export-hf: {tmp_path / 'hf'}: already exists (pass --overwrite to replace it)"
    )
