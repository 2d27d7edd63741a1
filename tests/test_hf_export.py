"""fairseq-bio-export-hf: bio_roberta masked LMs (byte-level BPE, WordPiece and SentencePiece
vocabularies learned on PubMed, post-LN and pre-LN), fine-tuned NER taggers (softmax and CRF heads)
and sentence-level heads (GAD classification, HoC multi-label, BIOSSES regression on pairs) load
offline with transformers' Auto classes and give fairseq's token ids, logits, tags and window-pooled
predictions on real PubMed/NCBI-disease/BLURB texts; import(export(m)) is m (a fine-tuned model: its
encoder); what cannot be exported exactly is refused with nothing written."""

import collections
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from conftest import run_cli
from helpers.checkpoints import save_with
from helpers.fastbpe import FASTBPE_MISSING
from helpers.hf_models import check_against_hf, randomise, real_sentences

from fairseq_bio import checkpoints, runs
from fairseq_bio.cli.export_hf import cli_main
from fairseq_bio.hf import (
    CRF_FILE,
    HFConvertError,
    build_model,
    encoder_checkpoint,
    encoder_checkpoint_cfg,
    export_hf,
    import_hf,
    read_sentencepiece_model,
)
from fairseq_bio.models.bio_roberta import BioRobertaModel

os.environ["HF_HUB_OFFLINE"] = "1"
transformers = pytest.importorskip("transformers")
TOL = 1e-4
SMALL = dict(
    encoder_layers=2,
    encoder_embed_dim=32,
    encoder_ffn_embed_dim=64,
    encoder_attention_heads=4,
    max_positions=256,
)


def make_checkpoint(data_dir, path, seed=0, **options):
    """A bio_roberta encoder checkpoint over ``data_dir``'s vocabulary with random weights."""
    cfg = encoder_checkpoint_cfg(str(data_dir), {**SMALL, **options}, tokens_per_sample=128)
    torch.manual_seed(seed)
    _, model = build_model(cfg, str(data_dir))
    model.load_state_dict(randomise(model.state_dict(), seed))
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(encoder_checkpoint(cfg, model.state_dict(), {}), path)
    return path


@pytest.fixture(scope="module")
def trained_bytebpe(data_bin, tmp_path_factory):
    """A checkpoint written by fairseq-hydra-train (3 updates) on the byte-BPE data, then given
    random weights."""
    data = data_bin("bytebpe")
    work = tmp_path_factory.mktemp("trained")
    run_cli(
        runs.hydra_train(
            "bio_roberta_tiny",
            f"task.data={data}",
            "model.encoder_layers=2",
            "model.encoder_embed_dim=32",
            "model.encoder_ffn_embed_dim=64",
            "model.encoder_attention_heads=4",
            "model.max_positions=128",
            "task.tokens_per_sample=128",
            "optimization.max_update=3",
            "dataset.disable_validation=true",
            "checkpoint.save_interval_updates=3",
            "common.tensorboard_logdir=null",
            "lr_scheduler.warmup_updates=1",
            save_dir=work / "ckpt",
        ),
        cwd=work,
    )
    path = work / "ckpt" / "checkpoint_last.pt"
    state = checkpoints.load_checkpoint(path)
    state["model"] = randomise(state["model"])
    torch.save(state, path)
    return path, data


def test_trained_byte_bpe_checkpoint_exports_to_roberta(trained_bytebpe, pubmed_corpus, tmp_path):
    checkpoint, data = trained_bytebpe
    out = tmp_path / "hf"
    result = export_hf(checkpoint, out)  # vocabulary found through the checkpoint's task.data
    assert result["architecture"] == "RobertaForMaskedLM" and result["logits_max_abs_diff"] <= TOL
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md",
        "config.json",
        "merges.txt",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.json",
    ]
    diff, tokenizer, model = check_against_hf(
        out, checkpoint, data, real_sentences(pubmed_corpus, 32)
    )
    assert diff <= TOL
    assert type(model).__name__ == "RobertaForMaskedLM" and "Roberta" in type(tokenizer).__name__
    card = (out / "README.md").read_text()
    for text in (
        "## Architecture",
        "2 layers, hidden size 32",
        "byte-level BPE",
        f"on `{data}`",
        "updates: 3",
        "## Metrics",
        "fairseq's token ids, and the logits differ from fairseq's by at most",
    ):
        assert text in card, text
    # fill-mask through HF's own pipeline works on the exported tokenizer's <mask>
    pipe = transformers.pipeline("fill-mask", model=str(out), tokenizer=str(out))
    assert len(pipe("The patient was treated with <mask> for hypertension.", top_k=3)) == 3


@pytest.fixture(scope="module")
def wordpiece_checkpoint(data_bin, tmp_path_factory):
    data = data_bin("wordpiece")
    return make_checkpoint(data, tmp_path_factory.mktemp("wordpiece") / "model.pt"), data


def test_wordpiece_checkpoint_exports_with_berts_normalisation_and_fairseqs_pairs(
    wordpiece_checkpoint, pubmed_corpus, tmp_path
):
    """WordPiece: BERT's normalisation (lower-casing, accents stripped) but fairseq's pair template:
    transformers' BertTokenizer class would build [CLS] a [SEP] b [SEP] with token type 1, which
    this one-type model cannot take.
    """
    checkpoint, data = wordpiece_checkpoint
    out = tmp_path / "hf"
    result = export_hf(checkpoint, out, data=str(data))
    assert result["tokenizer"] == "PreTrainedTokenizerFast" and "vocab.txt" in result["files"]
    sentences = real_sentences(pubmed_corpus, 32, start=300)
    assert any(not s.isascii() for s in real_sentences(pubmed_corpus, 400)) and any(
        c.isupper() for c in sentences[0]
    )
    diff, tokenizer, model = check_against_hf(out, checkpoint, data, sentences)
    assert (
        diff <= TOL
        and tokenizer(sentences[0].upper())["input_ids"]
        == tokenizer(sentences[0].lower())["input_ids"]
    )
    hub = BioRobertaModel.from_pretrained(
        str(checkpoint.parent), checkpoint.name, data_name_or_path=str(data)
    )
    for a, b in zip(sentences[:8], sentences[8:16]):
        encoded = tokenizer(a, b, return_tensors="pt")
        assert (
            encoded["input_ids"][0].tolist() == hub.encode(a, b).tolist()
        )  # <s> a </s></s> b </s>
        with torch.no_grad():
            model(**encoded)  # whatever the tokenizer returns, the model takes


def test_round_trip_import_of_export_is_the_same_model(
    wordpiece_checkpoint, trained_bytebpe, pubmed_corpus, tmp_path
):
    sentences = real_sentences(pubmed_corpus, 16, start=600)
    for (checkpoint, data), name in (
        (wordpiece_checkpoint, "wordpiece"),
        (trained_bytebpe, "bytebpe"),
    ):
        hf, back = tmp_path / f"{name}-hf", tmp_path / f"{name}-back"
        export_hf(checkpoint, hf, data=str(data))
        info = import_hf(hf, back, log=lambda line: None)
        assert info["mlm_head"] == "imported"
        original = BioRobertaModel.from_pretrained(
            str(checkpoint.parent), checkpoint.name, data_name_or_path=str(data)
        )
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


def test_pre_ln_exports_to_roberta_prelayernorm_or_megatron_bert(data_bin, pubmed_corpus, tmp_path):
    """Pre-LN with an embedding LayerNorm: RobertaPreLayerNorm; without one (bio_megatron_*):
    MegatronBert; post-LN without one has no HF class and is refused."""
    data = data_bin("wordpiece")
    with_norm = make_checkpoint(
        data, tmp_path / "a" / "model.pt", encoder_normalize_before=True, layernorm_embedding=True
    )
    result = export_hf(with_norm, tmp_path / "hf", data=str(data))
    assert result["architecture"] == "RobertaPreLayerNormForMaskedLM"
    diff, _, model = check_against_hf(
        tmp_path / "hf", with_norm, data, real_sentences(pubmed_corpus, 16, start=900)
    )
    assert diff <= TOL and type(model).__name__ == "RobertaPreLayerNormForMaskedLM"

    without = make_checkpoint(data, tmp_path / "b" / "model.pt", encoder_normalize_before=True)
    result = export_hf(without, tmp_path / "hf-megatron", data=str(data))
    assert result["architecture"] == "MegatronBertForMaskedLM"
    sentences = real_sentences(pubmed_corpus, 16, start=900)
    diff, _, model = check_against_hf(tmp_path / "hf-megatron", without, data, sentences)
    assert diff <= TOL and type(model).__name__ == "MegatronBertForMaskedLM"

    post_ln = make_checkpoint(data, tmp_path / "c" / "model.pt", layernorm_embedding=False)
    with pytest.raises(SystemExit) as exit_info:
        cli_main(
            ["--checkpoint", str(post_ln), "--out", str(tmp_path / "refused"), "--vocab", str(data)]
        )
    error = str(exit_info.value.code)
    assert (
        error.startswith("fairseq-bio-export-hf: post-LN model without an embedding LayerNorm")
        and "\n" not in error
    )
    assert not (tmp_path / "refused").exists()


def sentence_head(state, name="bio_sentence"):
    """fairseq's RobertaClassificationHead parameters (what sentence-level fine-tuning adds) in a
    state dict."""
    dim = state["model"]["encoder.sentence_encoder.embed_tokens.weight"].size(1)
    for part, shape in (("dense", (dim, dim)), ("out_proj", (2, dim))):
        state["model"][f"classification_heads.{name}.{part}.weight"] = torch.zeros(shape)
        state["model"][f"classification_heads.{name}.{part}.bias"] = torch.zeros(shape[0])


def test_refusals_leave_nothing(wordpiece_checkpoint, learned_vocab, tmp_path):
    checkpoint, data = wordpiece_checkpoint
    moved = save_with(
        checkpoint, tmp_path / "moved" / "model.pt", lambda s: s["cfg"]["task"].update(data="/gone")
    )
    electra = save_with(
        checkpoint,
        tmp_path / "electra" / "model.pt",
        lambda s: s["cfg"]["model"].update(_name="bio_electra"),
    )
    sentence = save_with(checkpoint, tmp_path / "sentence" / "model.pt", sentence_head)
    two = save_with(sentence, tmp_path / "two" / "model.pt", lambda s: sentence_head(s, "other"))
    spm = tmp_path / "spm-vocab"
    shutil.copytree(learned_vocab("sentencepiece"), spm)
    proto = read_sentencepiece_model(str(spm / "spm.model"))
    proto.normalizer_spec.add_dummy_prefix = False
    (spm / "spm.model").write_bytes(proto.SerializeToString())
    no_prefix = make_checkpoint(spm, tmp_path / "no-prefix" / "model.pt")
    cases = [
        (
            ["--checkpoint", str(tmp_path / "none.pt"), "--out", str(tmp_path / "o1")],
            "none.pt: no such checkpoint",
        ),
        (["--checkpoint", str(moved), "--out", str(tmp_path / "o2")], "no dict.txt + bpe.json in"),
        (
            ["--checkpoint", str(electra), "--out", str(tmp_path / "o3"), "--vocab", str(data)],
            "model 'bio_electra' but no discriminator parameters; not a bio_electra checkpoint",
        ),
        (
            ["--checkpoint", str(sentence), "--out", str(tmp_path / "o4"), "--vocab", str(data)],
            "classification head 'bio_sentence': the checkpoint's task (BioMaskedLMTask) saved no labels for it; "
            "sentence-level heads are exported from bio_sentence_prediction checkpoints",
        ),
        (
            ["--checkpoint", str(two), "--out", str(tmp_path / "o5"), "--vocab", str(data)],
            "has 2 classification heads (bio_sentence, other); an HF model has one: pick it with --head NAME",
        ),
        (
            ["--checkpoint", str(no_prefix), "--out", str(tmp_path / "o6"), "--vocab", str(spm)],
            "normalizer_spec.add_dummy_prefix is False",
        ),
        (
            [
                "--checkpoint",
                str(checkpoint),
                "--out",
                str(tmp_path / "o7"),
                "--vocab",
                str(data),
                "--tolerance",
                "-1",
            ],
            "HF's outputs differ from fairseq's",
        ),  # a failed check: nothing that looks complete is left
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit) as exit_info:
            cli_main(argv)
        error = str(exit_info.value.code)
        assert (
            error.startswith("fairseq-bio-export-hf: ") and "\n" not in error and message in error
        ), error
        assert not Path(argv[3]).exists()
    left = ["electra", "moved", "no-prefix", "sentence", "spm-vocab", "two"]
    assert sorted(p.name for p in tmp_path.iterdir()) == left  # no temp directories left either


def test_command_line(wordpiece_checkpoint, tmp_path, capsys):
    checkpoint, data = wordpiece_checkpoint
    cli_main(["--checkpoint", str(checkpoint), "--out", str(tmp_path / "hf"), "--vocab", str(data)])
    out = capsys.readouterr().out
    assert out.startswith(
        f"wrote {tmp_path / 'hf'} (RobertaForMaskedLM, PreTrainedTokenizerFast); checked on 5 real "
        "sentences: token ids equal fairseq's"
    )
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (
        config["vocab_size"] == len(open(data / "dict.txt").readlines()) + 5
        and config["pad_token_id"] == 1
    )
    # The installed console script: a refusal is one line on stderr and exit status 1.
    result = run_cli(
        ["fairseq-bio-export-hf", "--checkpoint", checkpoint, "--out", tmp_path / "hf"],
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"fairseq-bio-export-hf: {tmp_path / 'hf'}: already exists; pass --overwrite to replace it"
    )


# ---------------------------------------------------------------------------------------------- SentencePiece


@pytest.fixture(scope="module")
def sentencepiece_checkpoints(learned_vocab, pubmed_corpus, tmp_path_factory):
    """{spm type: (checkpoint, vocabulary dir)}: random-weight checkpoints over unigram and BPE
    vocabularies."""
    from fairseq_bio_preprocess.vocab import learn_vocab

    work = tmp_path_factory.mktemp("spm")
    bpe = learn_vocab(
        pubmed_corpus / "train.txt",
        work / "bpe-vocab",
        kind="sentencepiece",
        vocab_size=3000,
        spm_type="bpe",
    )
    vocabs = {"unigram": learned_vocab("sentencepiece"), "bpe": bpe}
    return {
        kind: (make_checkpoint(vocab, work / kind / "model.pt"), vocab)
        for kind, vocab in vocabs.items()
    }


@pytest.mark.parametrize("kind", ["unigram", "bpe"])
def test_sentencepiece_checkpoint_exports_with_its_ids(
    kind, sentencepiece_checkpoints, pubmed_corpus, tmp_path
):
    checkpoint, vocab = sentencepiece_checkpoints[kind]
    out, notes = tmp_path / "hf", []
    result = export_hf(checkpoint, out, data=str(vocab), log=notes.append)
    assert result["tokenizer"] == "PreTrainedTokenizerFast" and "spm.model" not in result["files"]
    diff, tokenizer, _ = check_against_hf(
        out, checkpoint, vocab, real_sentences(pubmed_corpus, 32, start=1200)
    )
    assert diff <= TOL and tokenizer.mask_token == "<mask>" and tokenizer.pad_token_id == 1
    assert ("float32" in " ".join(notes)) == (
        kind == "unigram"
    )  # the documented unigram tie caveat, one line


def test_sentencepiece_ids_differ_only_by_the_order_of_equal_scoring_pieces(
    sentencepiece_checkpoints, pubmed_corpus, tmp_path
):
    """Over 1,500 real sentences and digit runs (where pieces '0' and '00' tie), HF's tokens are
    fairseq's, BPE exactly, unigram up to the order of the same pieces (what the card's note
    says)."""
    sentences = real_sentences(pubmed_corpus, 1500) + [
        f"{n} 0.{n} x{n}y" for n in (1000, 70007, 100001, 30000500)
    ]
    for kind, (checkpoint, vocab) in sentencepiece_checkpoints.items():
        export_hf(checkpoint, tmp_path / kind, data=str(vocab), log=lambda line: None)
        tokenizer = transformers.AutoTokenizer.from_pretrained(
            str(tmp_path / kind), local_files_only=True
        )
        hub = BioRobertaModel.from_pretrained(
            str(checkpoint.parent), checkpoint.name, data_name_or_path=str(vocab)
        )
        differ = [s for s in sentences if tokenizer(s)["input_ids"] != hub.encode(s).tolist()]
        assert not differ if kind == "bpe" else len(differ) <= 5, differ
        for sentence in differ:
            hf, fs = tokenizer(sentence)["input_ids"], hub.encode(sentence).tolist()
            assert collections.Counter(hf) == collections.Counter(fs), sentence


# ---------------------------------------------------------------------------------------------------- fastBPE


@pytest.fixture(scope="module")
def fastbpe_checkpoint(learned_vocab, tmp_path_factory):
    """(checkpoint, vocabulary dir): random weights over the fastbpe vocabulary learned on the
    slice."""
    pytest.importorskip("fastBPE", reason=FASTBPE_MISSING)
    vocab = learned_vocab("fastbpe")
    return make_checkpoint(vocab, tmp_path_factory.mktemp("fastbpe") / "model.pt"), vocab


def test_fastbpe_checkpoint_exports_with_its_ids(fastbpe_checkpoint, pubmed_corpus, tmp_path):
    from fairseq_bio_preprocess.encode import Encoder

    checkpoint, vocab = fastbpe_checkpoint
    out = tmp_path / "hf"
    result = export_hf(checkpoint, out, data=str(vocab))
    assert result["tokenizer"] == "PreTrainedTokenizerFast" and result["logits_max_abs_diff"] <= TOL
    assert result["files"] == [
        "README.md",
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    diff, tokenizer, _ = check_against_hf(
        out, checkpoint, vocab, real_sentences(pubmed_corpus, 32, start=1800)
    )
    assert diff <= TOL and tokenizer.mask_token == "<mask>" and tokenizer.pad_token_id == 1
    assert "fastBPE" in (out / "README.md").read_text()

    # Every held-out sentence (text the codes were not learned on) gets fairseq's ids and decodes
    # back.
    hub = BioRobertaModel.from_pretrained(
        str(checkpoint.parent), checkpoint.name, data_name_or_path=str(vocab)
    )
    dictionary = hub.task.source_dictionary
    valid = [
        line.strip() for line in open(pubmed_corpus / "valid.txt", encoding="utf-8") if line.strip()
    ]
    hf_ids = [tokenizer(s)["input_ids"] for s in valid]
    assert hf_ids == [hub.encode(s).tolist() for s in valid]
    assert sum(len(ids) - 2 for ids in hf_ids) > 1.2 * sum(
        len(s.split()) for s in valid
    )  # words do get split
    known = [(s, ids) for s, ids in zip(valid, hf_ids) if dictionary.unk() not in ids]
    assert [tokenizer.decode(ids, skip_special_tokens=True) for _, ids in known] == [
        s for s, _ in known
    ]

    # Characters the vocabulary lacks are one <unk> each, repeated letters merge as fastBPE merges
    # them, and whitespace other than one space splits words as fairseq-bio-encode (the training
    # data's encoding) does.
    odd = [
        "Tab\tseparated  words,\u00a0a non-breaking\u2009thin space and\u3000an ideographic one ",
        "\u2603\u2603-3 fatty acids (\u4e2d\u6587) at 10000000 \u00b5g/kg, p < 0.0001 in aaaa",
        "\x1fseparator\x85next line",
    ]
    expected = [
        [dictionary.bos()] + [dictionary.index(s) for s in line.split(" ")] + [dictionary.eos()]
        for line in Encoder(vocab).encode(odd)
    ]
    assert [tokenizer(s)["input_ids"] for s in odd] == expected
    assert expected[1].count(dictionary.unk()) >= 4


def test_fastbpe_round_trip_and_refusals(fastbpe_checkpoint, pubmed_corpus, tmp_path):
    checkpoint, vocab = fastbpe_checkpoint
    hf, back = tmp_path / "hf", tmp_path / "back"
    export_hf(checkpoint, hf, data=str(vocab))
    info = import_hf(hf, back, log=lambda line: None)
    assert info["vocabulary"]["kind"] == "fastbpe" and info["mlm_head"] == "imported"
    assert json.loads((back / "bpe.json").read_text()) == {"_name": "fastbpe", "bpe_codes": "codes"}
    original = BioRobertaModel.from_pretrained(
        str(checkpoint.parent), checkpoint.name, data_name_or_path=str(vocab)
    )
    again = BioRobertaModel.from_pretrained(str(back), "model.pt")
    before, after = original.model.state_dict(), again.model.state_dict()
    assert set(before) == set(after) and all(torch.equal(before[k], after[k]) for k in before)
    original.eval(), again.eval()
    for sentence in real_sentences(pubmed_corpus, 16, start=2000):
        tokens = original.encode(sentence)
        assert torch.equal(again.encode(sentence), tokens)
        assert torch.equal(again.model(tokens[None])[0], original.model(tokens[None])[0])

    # Codes fastBPE would misread, or whose merges make a subword dict.txt lacks: one line, nothing
    # written.
    codes = (vocab / "codes").read_text(encoding="utf-8")
    n = codes.count("\n")
    cases = {
        "short": ("t h\n" + codes, "codes:1: expected 'left right count', got 't h'"),
        "twice": (
            codes + codes.split("\n")[0] + "\n",
            f"codes:{n + 1}: merge {' '.join(codes.split(' ')[:2])!r} is listed twice",
        ),
        "outside": (
            codes + "\u2603 \u2603</w> 7\n",
            f"codes:{n + 1}: '\u2603' (dict.txt symbol '\u2603@@') is not "
            "in dict.txt; fairseq would read it as <unk> where an HF tokenizer cannot",
        ),
    }
    for name, (text, message) in cases.items():
        shutil.copytree(vocab, tmp_path / name)
        (tmp_path / name / "codes").write_text(text, encoding="utf-8")
        with pytest.raises(SystemExit) as exit_info:
            cli_main(
                [
                    "--checkpoint",
                    str(checkpoint),
                    "--out",
                    str(tmp_path / f"{name}-hf"),
                    "--vocab",
                    str(tmp_path / name),
                ]
            )
        error = str(exit_info.value.code)
        assert (
            error.startswith("fairseq-bio-export-hf: ")
            and error.endswith(message)
            and "\n" not in error
        ), error
        assert not (tmp_path / f"{name}-hf").exists()
    # The import reads a "</w>" BPE as fastBPE codes only when it splits words as fastBPE does.
    spec = json.loads((hf / "tokenizer.json").read_text(encoding="utf-8"))
    spec["pre_tokenizer"] = {"type": "Whitespace"}
    (hf / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    with pytest.raises(
        HFConvertError, match='tokenizer.json: field "pre_tokenizer": a BPE with "</w>" is read as'
    ):
        import_hf(hf, tmp_path / "refused", log=lambda line: None)
    assert not (tmp_path / "refused").exists()


# ------------------------------------------------------------------------------------------ fine-tuned taggers


def ncbi_sentences(ncbi_slice, n=40, max_words=40):
    """Real NCBI-disease test sentences (words, gold tags) short enough for one window of the tiny
    encoder."""
    from fairseq_bio.data.conll import read_conll

    return [s for s in read_conll(ncbi_slice / "test.tsv") if len(s.words) <= max_words][:n]


def tag_like_the_card(tokenizer, model, words):
    """The model card's ``tag``: words encoded one at a time, each word's label read at its first
    token."""
    ids, first = [tokenizer.bos_token_id], []
    for i, word in enumerate(words):
        first.append(len(ids))
        ids += tokenizer(word if i == 0 else " " + word, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([ids + [tokenizer.eos_token_id]])).logits[0]
    return logits[first], [model.config.id2label[int(i)] for i in logits[first].argmax(-1)]


@pytest.fixture(scope="module")
def exported_tagger(ner_model, tmp_path_factory):
    save_dir, _ = ner_model
    out, warnings = tmp_path_factory.mktemp("tagger") / "hf", []
    result = export_hf(
        save_dir / "checkpoint_best.pt", out, log=warnings.append
    )  # vocabulary beside it
    return save_dir / "checkpoint_best.pt", out, result, warnings


def test_tagging_checkpoint_exports_to_token_classification(exported_tagger, ncbi_slice):
    from fairseq_bio.inference.tagging import load_tagger, predict_tags
    from fairseq_bio.data.tag_schemes import to_bio

    checkpoint, out, result, warnings = exported_tagger
    assert (
        result["architecture"] == "RobertaForTokenClassification"
        and result["logits_max_abs_diff"] <= TOL
    )
    assert (
        result["files"]
        == [
            "README.md",
            "config.json",
            "merges.txt",
            "model.safetensors",
            "tokenizer.json",
            "tokenizer_config.json",
            "vocab.json",
        ]
        and not warnings
    )
    state = checkpoints.load_checkpoint(checkpoint)
    labels = state["task_state"]["labels"]
    config = json.loads((out / "config.json").read_text())
    assert config["id2label"] == {str(i): label for i, label in enumerate(labels)}
    assert (
        config["label2id"] == {label: i for i, label in enumerate(labels)}
        and config["fairseq_bio"]["crf"] is None
    )

    task, tagger = load_tagger(str(checkpoint))
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(out), local_files_only=True)
    model = transformers.AutoModelForTokenClassification.from_pretrained(
        str(out), local_files_only=True
    ).eval()
    sentences = ncbi_sentences(ncbi_slice)
    head = task.cfg.head_name
    for sentence in sentences:
        words = task.word_encoder.encode_sentence(sentence.words)
        fs_ids = torch.tensor([0] + [i for word in words for i in word] + [2])
        assert (
            tokenizer(" ".join(sentence.words))["input_ids"] == fs_ids.tolist()
        )  # the text gives the same ids
        with torch.no_grad():
            fs_logits = tagger(fs_ids[None], features_only=True, classification_head_name=head)[0][
                0
            ]
        assert (model(fs_ids[None]).logits[0] - fs_logits).abs().max() <= TOL
        first = torch.tensor([0] + [len(w) for w in words[:-1]]).cumsum(0) + 1
        hf_first, _ = tag_like_the_card(tokenizer, model, sentence.words)
        assert (hf_first - fs_logits[first]).abs().max() <= TOL
    # HF tags every word as fairseq-bio-predict does (both read the labels with conlleval's rules)
    predicted = predict_tags(task, tagger, sentences, progress=False)
    assert [to_bio(tag_like_the_card(tokenizer, model, s.words)[1]) for s in sentences] == predicted
    assert any(
        t != "O" for tags in predicted for t in tags
    )  # the tagger finds entities: the comparison has teeth

    card = (out / "README.md").read_text()
    val_f1 = state["extra_state"]["val_loss"]
    for text in (
        "pipeline_tag: token-classification",
        "## Labels",
        "`O`, `B-Disease`, `I-Disease`",
        f"validation f1 of this checkpoint: {val_f1:.4f}",
        "- test set: not recorded",
        "masked-LM head",
        "def tag(words):",
        "windows",
    ):
        assert text in card, text


def test_import_of_an_exported_tagger_keeps_its_encoder(exported_tagger, pubmed_corpus, tmp_path):
    checkpoint, out, _, _ = exported_tagger
    info = import_hf(out, tmp_path / "back", log=lambda line: None)
    assert info["mlm_head"] == "initialised" and info["dropped"] == ["classification head"]
    tuned = BioRobertaModel.from_pretrained(
        str(checkpoint.parent),
        checkpoint.name,
        data_name_or_path=str(checkpoint.parent),
        vocab=str(checkpoint.parent),
    )
    back = BioRobertaModel.from_pretrained(str(tmp_path / "back"), "model.pt")
    tuned.eval(), back.eval()
    for sentence in real_sentences(pubmed_corpus, 16, start=1500):
        tokens = tuned.encode(sentence)
        assert torch.equal(back.encode(sentence), tokens)
        with torch.no_grad():
            states = [
                tuned.model(tokens[None], features_only=True, return_all_hiddens=True)[1][
                    "inner_states"
                ],
                back.model(tokens[None], features_only=True, return_all_hiddens=True)[1][
                    "inner_states"
                ],
            ]
        assert all(torch.equal(a, b) for a, b in zip(*states))


def viterbi(logits, crf):
    """Best label path over ``T x K`` logits with the transitions of ``crf.json`` (a reference, not
    fairseq's)."""
    start, end, trans = (torch.tensor(crf[k]) for k in ("start", "end", "transitions"))
    if crf["allowed"] is not None:
        start = start + crf["disallowed_score"] * ~torch.tensor(crf["allowed_start"])
        trans = trans + crf["disallowed_score"] * ~torch.tensor(crf["allowed"])
    score, back = start + logits[0], []
    for t in range(1, len(logits)):
        best, previous = (score[:, None] + trans).max(0)
        score, back = best + logits[t], back + [previous]
    path = [int((score + end).argmax())]
    for previous in reversed(back):
        path.append(int(previous[path[-1]]))
    return [crf["labels"][i] for i in reversed(path)]


def test_crf_tagger_exports_its_emissions_and_transitions(ner_model, ncbi_slice, tmp_path):
    """A CRF head: HF logits are its emissions, crf.json holds its transitions, one warning line
    says so, and Viterbi over HF's logits with crf.json tags like fairseq-bio-predict."""
    from fairseq_bio.inference.tagging import load_tagger, predict_tags
    from fairseq_bio.data.tag_schemes import to_bio

    save_dir, _ = ner_model
    g = torch.Generator().manual_seed(0)

    def add_crf(state):
        state["cfg"]["task"]["crf"] = True
        for name, shape in (("transitions", (3, 3)), ("start", (3,)), ("end", (3,))):
            state["model"][f"classification_heads.bio_tagging.crf.{name}"] = 2 * torch.randn(
                shape, generator=g
            )

    checkpoint = save_with(
        save_dir / "checkpoint_best.pt", tmp_path / "crf" / "checkpoint_best.pt", add_crf
    )
    warnings = []
    result = export_hf(checkpoint, tmp_path / "hf", data=str(save_dir), log=warnings.append)
    assert result["logits_max_abs_diff"] <= TOL and CRF_FILE in result["files"]
    assert (
        len(warnings) == 1
        and "has a CRF, which HF has no layer for" in warnings[0]
        and "\n" not in warnings[0]
    )
    crf = json.loads((tmp_path / "hf" / CRF_FILE).read_text())
    state = checkpoints.load_checkpoint(checkpoint)["model"]
    assert torch.equal(
        torch.tensor(crf["transitions"]), state["classification_heads.bio_tagging.crf.transitions"]
    )
    assert (
        crf["labels"] == ["O", "B-Disease", "I-Disease"] and crf["allowed"][0][2] is False
    )  # O -> I-X
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (
        config["fairseq_bio"]["crf"] == CRF_FILE
        and "in crf.json" in (tmp_path / "hf" / "README.md").read_text()
    )

    task, tagger = load_tagger(str(checkpoint), vocab=str(save_dir))
    tokenizer = transformers.AutoTokenizer.from_pretrained(
        str(tmp_path / "hf"), local_files_only=True
    )
    model = transformers.AutoModelForTokenClassification.from_pretrained(
        str(tmp_path / "hf")
    ).eval()
    sentences = ncbi_sentences(ncbi_slice, 30)
    tagged = [tag_like_the_card(tokenizer, model, s.words) for s in sentences]
    decoded = [viterbi(logits, crf) for logits, _ in tagged]
    assert decoded == predict_tags(task, tagger, sentences, progress=False)
    assert decoded != [
        to_bio(labels) for _, labels in tagged
    ]  # the transitions matter: argmax alone tags otherwise


def test_pre_ln_tagger_exports_to_roberta_prelayernorm(ner_model, ncbi_slice, tmp_path):
    from fairseq_bio.inference.tagging import load_tagger

    save_dir, _ = ner_model
    g = torch.Generator().manual_seed(1)

    def pre_ln(state):  # the same weights read as a pre-LN encoder, plus its final LayerNorm
        state["cfg"]["model"].update(encoder_normalize_before=True, layernorm_embedding=True)
        dim = state["model"]["encoder.sentence_encoder.embed_tokens.weight"].size(1)
        state["model"]["encoder.sentence_encoder.layer_norm.weight"] = 1 + 0.2 * torch.randn(
            dim, generator=g
        )
        state["model"]["encoder.sentence_encoder.layer_norm.bias"] = 0.2 * torch.randn(
            dim, generator=g
        )

    checkpoint = save_with(
        save_dir / "checkpoint_best.pt", tmp_path / "pre-ln" / "checkpoint_best.pt", pre_ln
    )
    result = export_hf(checkpoint, tmp_path / "hf", data=str(save_dir))
    assert result["architecture"] == "RobertaPreLayerNormForTokenClassification"
    assert result["logits_max_abs_diff"] <= TOL
    task, tagger = load_tagger(str(checkpoint), vocab=str(save_dir))
    assert tagger.encoder.sentence_encoder.layer_norm is not None  # fairseq really runs it pre-LN
    tokenizer = transformers.AutoTokenizer.from_pretrained(
        str(tmp_path / "hf"), local_files_only=True
    )
    model = transformers.AutoModelForTokenClassification.from_pretrained(
        str(tmp_path / "hf")
    ).eval()
    for sentence in ncbi_sentences(ncbi_slice, 8):
        words = task.word_encoder.encode_sentence(sentence.words)
        ids = torch.tensor([[0] + [i for word in words for i in word] + [2]])
        with torch.no_grad():
            expected = tagger(ids, features_only=True, classification_head_name=task.cfg.head_name)[
                0
            ][0]
        first = torch.tensor([0] + [len(w) for w in words[:-1]]).cumsum(0) + 1
        assert (
            tag_like_the_card(tokenizer, model, sentence.words)[0] - expected[first]
        ).abs().max() <= TOL


# ------------------------------------------------------------------------------- fine-tuned sentence-level heads


def load_sentence_model(checkpoint, cache, vocab=None, **overrides):
    """A bio_sentence_prediction checkpoint as fairseq loads it (vocabulary beside it unless
    ``vocab``, encoded texts cached in ``cache``): (model in eval mode, task)."""
    from fairseq import checkpoint_utils

    overrides.update(vocab=str(vocab or checkpoint.parent), cache_dir=str(cache))
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(checkpoint)], arg_overrides=overrides
    )
    return models[0].eval(), task


def fairseq_sentence_outputs(model, task, examples):
    """Along bio_sentence_prediction's own path (its dataset, collater and criterion): (dataset,
    each example's window rows as id lists, ``B x K`` window-pooled outputs, targets)."""
    from fairseq_bio.criterions.bio_sentence_prediction import (
        BioSentencePredictionCriterion,
        BioSentencePredictionCriterionConfig,
    )

    dataset = task.build_dataset(examples, shuffle=False)
    batch = dataset.collater([dataset[i] for i in range(len(examples))])
    with torch.no_grad():
        pooled = BioSentencePredictionCriterion(BioSentencePredictionCriterionConfig(), task).pool(
            model, batch
        )
    rows = [[] for _ in examples]
    for row, k in zip(batch["net_input"]["src_tokens"].tolist(), batch["row_example"].tolist()):
        rows[k].append([t for t in row if t != task.dictionary.pad()])
    return dataset, rows, pooled, batch.get("target")


def load_hf_classifier(out):
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(out), local_files_only=True)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        str(out), local_files_only=True
    )
    return tokenizer, model.eval()


def as_words(example):
    """An example's texts as fairseq_bio reads them: words split at whitespace, joined by single
    spaces."""
    return tuple(" ".join(text.split()) for text in example.texts)


def hf_sentence_outputs(tokenizer, model, texts, labels=None):
    """HF's padded batch over ``texts`` (a list of 1- or 2-tuples): (each row's ids, ``B x K``
    logits, HF's loss when ``labels`` are given)."""
    columns = [list(column) for column in zip(*texts)]
    encoded = tokenizer(*columns, padding=True, return_tensors="pt")
    ids = [
        row[mask].tolist()
        for row, mask in zip(encoded["input_ids"], encoded["attention_mask"].bool())
    ]
    with torch.no_grad():
        out = model(
            **encoded, labels=labels
        )  # token_type_ids included, when the tokenizer returns them
    return ids, out.logits, out.loss


def window_texts(dataset, i, example):
    """The texts of the windows fairseq_bio makes of example ``i`` (1- or 2-tuples, as HF's
    tokenizer takes them), or None when a pair's first text was cut (fairseq keeps only its first
    pieces, which no text gives). A window that starts after the text's first word starts with the
    space before it: its words were encoded in context.
    """
    keep, windows, _ = dataset.plans[i]
    *first, last = [text.split() for text in example.texts]
    if first and keep < dataset.first.piece_counts(i).sum():
        return None
    prefix = tuple(" ".join(words) for words in first)
    return [prefix + ((" " if a else "") + " ".join(last[a:b]),) for a, b in windows]


def compare_windows(tokenizer, model, dataset, rows, pooled, examples):
    """HF run on each window's text gets that window's fairseq row, and the mean of its logits is
    fairseq's window-pooled output (what the card tells HF users to do with long inputs); returns
    the examples compared.
    """
    compared = 0
    for i, example in enumerate(examples):
        texts = window_texts(dataset, i, example)
        if texts is not None:
            hf_ids, logits, _ = hf_sentence_outputs(tokenizer, model, texts)
            assert hf_ids == rows[i]
            assert (logits.mean(0) - pooled[i]).abs().max() <= TOL
            compared += 1
    return compared


def one_window(dataset, examples, *tensors):
    """The examples (and rows of ``tensors``) that fit one window: what HF can take as one padded
    batch."""
    keep = [i for i in range(len(examples)) if dataset.windows(i) == 1]
    return [examples[i] for i in keep], *(t[keep] for t in tensors)


def test_sentence_classification_exports_with_its_labels(gad_model, tmp_path):
    """GAD (single sentences, 2 classes): RobertaForSequenceClassification with id2label from the
    checkpoint's task state and problem_type single_label_classification; on 50 real dev sentences
    HF's tokenizer gives the rows fairseq_bio's task makes, HF's logits equal fairseq's and HF's
    loss is the criterion's cross-entropy.
    """
    import torch.nn.functional as F

    save_dir, _ = gad_model
    checkpoint, out = save_dir / "checkpoint_best.pt", tmp_path / "hf"
    result = export_hf(checkpoint, out)  # the vocabulary beside the checkpoint
    assert (
        result["architecture"] == "RobertaForSequenceClassification"
        and result["head"] == "bio_sentence"
    )
    assert (
        result["logits_max_abs_diff"] <= TOL and result["pairs"] == 2 and result["sentences"] == 7
    )
    assert (
        result["files"]
        == [
            "README.md",
            "config.json",
            "merges.txt",
            "model.safetensors",
            "tokenizer.json",
            "tokenizer_config.json",
            "vocab.json",
        ]
        and not result["warnings"]
    )
    labels = checkpoints.load_checkpoint(checkpoint)["task_state"]["labels"]
    tokenizer, model = load_hf_classifier(out)
    assert (
        type(model).__name__ == "RobertaForSequenceClassification"
        and model.num_labels == len(labels) == 2
    )
    assert model.config.id2label == dict(enumerate(labels)) and model.config.label2id == {
        "0": 0,
        "1": 1,
    }
    assert model.config.problem_type == "single_label_classification"

    fs_model, task = load_sentence_model(checkpoint, tmp_path / "cache")
    examples = task.read_split("valid")[:50]
    dataset, rows, pooled, target = fairseq_sentence_outputs(fs_model, task, examples)
    assert compare_windows(tokenizer, model, dataset, rows, pooled, examples) == 50
    single, pooled, target = one_window(dataset, examples, pooled, target)
    hf_ids, logits, loss = hf_sentence_outputs(
        tokenizer, model, [as_words(ex) for ex in single], labels=target
    )
    assert len(single) >= 45 and (logits - pooled).abs().max() <= TOL  # one padded batch
    assert loss.item() == pytest.approx(F.cross_entropy(pooled, target).item(), abs=TOL)
    assert (
        pooled.argmax(-1).unique().numel() == 2
    )  # the model tells sentences apart: the comparison has teeth
    # HF's own pipeline names the labels
    pipe = transformers.pipeline("text-classification", model=str(out), tokenizer=str(out))
    assert pipe(as_words(single[0])[0])[0]["label"] == labels[int(pooled[0].argmax())]

    card = (out / "README.md").read_text()
    for text in (
        "pipeline_tag: text-classification",
        "## Labels",
        "problem_type: single_label_classification",
        "2 labels (`id2label` in config.json): `0`, `1`",
        "dense 128 x 128, tanh",
        "## Input",
        "One text (`sentence`)",
        "the mean of the windows' logits",
        "HF sees one window",
        "5 real PubMed sentences and 2 pairs of them",
        "validation f1 of this checkpoint",
        "AutoModelForSequenceClassification",
        "masked-LM head",
    ):
        assert text in card, text
    # import back: the encoder is kept, the sentence head named as dropped
    info = import_hf(out, tmp_path / "back", log=lambda line: None)
    assert (
        info["dropped"] == ["classification head"] and info["check"]["hidden_max_abs_diff"] <= TOL
    )


def test_multilabel_head_on_windowed_abstracts(hoc_model, hoc_slice, tmp_path):
    """HoC (10 hallmarks, abstracts longer than the 128 positions): multi_label_classification with
    one label per hallmark; HF run on each window's words gives that window's fairseq row, and the
    mean of HF's window logits is fairseq's pooled prediction; HF's loss is the criterion's binary
    cross-entropy."""
    import torch.nn.functional as F

    save_dir, _ = hoc_model
    checkpoint, out = save_dir / "checkpoint_best.pt", tmp_path / "hf"
    export_hf(checkpoint, out)
    tokenizer, model = load_hf_classifier(out)
    assert model.config.problem_type == "multi_label_classification" and model.num_labels == 10
    assert model.config.id2label == {j: str(j) for j in range(10)}
    assert json.loads((out / "config.json").read_text())["fairseq_bio"]["threshold"] == 0.5

    fs_model, task = load_sentence_model(checkpoint, tmp_path / "cache", data=str(hoc_slice))
    examples = task.read_split("valid")[:10]
    dataset, rows, pooled, target = fairseq_sentence_outputs(fs_model, task, examples)
    assert sum(dataset.windows(i) for i in range(len(examples))) >= 2 * len(
        examples
    )  # most need several windows
    assert compare_windows(tokenizer, model, dataset, rows, pooled, examples) == len(examples)
    first_windows = [window_texts(dataset, i, ex)[0] for i, ex in enumerate(examples)]
    _, logits, loss = hf_sentence_outputs(tokenizer, model, first_windows, labels=target.float())
    assert loss.item() == pytest.approx(
        F.binary_cross_entropy_with_logits(logits, target.float()).item(), abs=TOL
    )
    card = (out / "README.md").read_text()
    assert (
        "multi_label_classification" in card
        and "sigmoid exceeds 0.5" in card
        and "consecutive windows" in card
    )


@pytest.fixture(scope="module")
def biosses_model(tiny_encoder, tmp_path_factory):
    """The tiny encoder fine-tuned for 20 updates on real BIOSSES pairs (regression; ~15 s)."""
    from conftest import SHARED_DATA, fine_tune_sentence

    save_dir = tmp_path_factory.mktemp("biosses")
    fine_tune_sentence(
        "biosses",
        SHARED_DATA / "biosses",
        save_dir,
        f"checkpoint.restore_file={tiny_encoder}",
        updates=20,
    )
    return save_dir


def test_regression_on_sentence_pairs(biosses_model, tmp_path, capsys):
    """BIOSSES pairs (regression): one unnamed output, problem_type regression; on the 16 real dev
    pairs HF's tokenizer(a, b) gives fairseq_bio's <s> a </s></s> b </s> rows (of each window, for
    the 4 pairs longer than 128 tokens), HF's outputs are fairseq's and its loss the squared
    error."""
    import torch.nn.functional as F

    checkpoint = biosses_model / "checkpoint_best.pt"
    cli_main(["--checkpoint", str(checkpoint), "--out", str(tmp_path / "hf")])
    assert (
        "checked on 7 real sentences (2 pairs): token ids equal fairseq's"
        in capsys.readouterr().out
    )
    tokenizer, model = load_hf_classifier(tmp_path / "hf")
    assert model.num_labels == 1 and model.config.problem_type == "regression"
    assert model.config.id2label == {0: "LABEL_0"}  # HF's own form: one output, no name

    fs_model, task = load_sentence_model(checkpoint, tmp_path / "cache")
    examples = task.read_split("valid")
    assert len(examples) == 16 and all(len(ex.texts) == 2 for ex in examples)
    dataset, rows, pooled, target = fairseq_sentence_outputs(fs_model, task, examples)
    # the pairs whose first text fairseq cuts (it keeps at most half a window of it) have no text
    # equivalent
    assert (
        compare_windows(tokenizer, model, dataset, rows, pooled, examples)
        == len(examples) - dataset.truncated
        >= 14
    )
    eos = task.dictionary.eos()
    assert all(
        r[0].count(eos) == 3 and r[0][r[0].index(eos) + 1] == eos for r in rows
    )  # <s> a </s></s> b </s>
    single, pooled, target = one_window(dataset, examples, pooled, target)
    _, logits, loss = hf_sentence_outputs(
        tokenizer, model, [as_words(ex) for ex in single], labels=target
    )
    assert len(single) >= 12 and (logits - pooled).abs().max() <= TOL and pooled.std() > 0
    assert loss.item() == pytest.approx(
        F.mse_loss(pooled.squeeze(-1), target.float()).item(), abs=TOL
    )
    card = (tmp_path / "hf" / "README.md").read_text()
    for text in (
        "problem_type: regression",
        "gold scores 0 to 4",
        "A pair of texts (`sentence1` and `sentence2`)",
        "`tokenizer(a, b)` builds exactly that",
        "the first text repeated in each",
        'tokenizer("<first text>", "<second text>", truncation=True',
    ):
        assert text in card, text


def test_wordpiece_pre_ln_pairs_export_to_roberta_prelayernorm(biosses_model, data_bin, tmp_path):
    """A pre-LN encoder over the WordPiece vocabulary with a 3-class sentence-pair head (random
    weights, the bio_sentence_prediction task's real config):
    RobertaPreLayerNormForSequenceClassification, and the WordPiece tokenizer reads pairs as fairseq
    does (<s> a </s></s> b </s>, one token type: BERT's own template differs).
    """
    data = data_bin("wordpiece")
    checkpoint = make_checkpoint(
        data,
        tmp_path / "wp" / "model.pt",
        seed=3,
        encoder_normalize_before=True,
        layernorm_embedding=True,
    )
    biosses_task = checkpoints.load_checkpoint(biosses_model / "checkpoint_best.pt")["cfg"]["task"]
    labels = ["dissimilar", "related", "similar"]
    g = torch.Generator().manual_seed(4)

    def pair_classifier(state):
        state["cfg"]["task"] = {
            **biosses_task,
            "kind": "classification",
            "labels": ",".join(labels),
            "vocab": str(data),
            "save_dir": str(tmp_path),
        }
        state["task_state"] = {"labels": labels, "kind": "classification"}
        for part, shape in (("dense", (32, 32)), ("out_proj", (3, 32))):
            state["model"][f"classification_heads.bio_sentence.{part}.weight"] = torch.randn(
                shape, generator=g
            )
            state["model"][f"classification_heads.bio_sentence.{part}.bias"] = torch.randn(
                shape[:1], generator=g
            )

    checkpoint = save_with(checkpoint, tmp_path / "pairs" / "model.pt", pair_classifier)
    result = export_hf(checkpoint, tmp_path / "hf", data=str(data))
    assert result["architecture"] == "RobertaPreLayerNormForSequenceClassification"
    assert result["tokenizer"] == "PreTrainedTokenizerFast" and result["logits_max_abs_diff"] <= TOL
    tokenizer, model = load_hf_classifier(tmp_path / "hf")
    assert type(model).__name__ == "RobertaPreLayerNormForSequenceClassification"
    assert model.config.id2label == dict(enumerate(labels))

    fs_model, task = load_sentence_model(checkpoint, tmp_path / "cache", vocab=data)
    assert (
        fs_model.encoder.sentence_encoder.layer_norm is not None
        and task.bpe_spec["_name"] == "bert"
    )
    examples = task.read_split("valid", require_labels=False)  # BIOSSES' pairs, their scores unread
    _, rows, pooled, _ = fairseq_sentence_outputs(fs_model, task, examples)
    hf_ids, logits, _ = hf_sentence_outputs(tokenizer, model, [as_words(ex) for ex in examples])
    assert hf_ids == [r[0] for r in rows]
    assert (
        tokenizer.convert_ids_to_tokens(hf_ids[0])[:1] == ["[CLS]"]
        and hf_ids[0].count(task.dictionary.eos()) == 3
    )
    assert (logits - pooled).abs().max() <= TOL and pooled.argmax(-1).unique().numel() > 1


def test_two_heads_need_head_to_pick_one(gad_model, tmp_path):
    save_dir, _ = gad_model
    g = torch.Generator().manual_seed(5)

    def second_head(state):
        for part, shape in (("dense", (128, 128)), ("out_proj", (3, 128))):
            state["model"][f"classification_heads.other.{part}.weight"] = torch.randn(
                shape, generator=g
            )
            state["model"][f"classification_heads.other.{part}.bias"] = torch.randn(
                shape[:1], generator=g
            )

    checkpoint = save_with(
        save_dir / "checkpoint_best.pt", tmp_path / "two" / "checkpoint_best.pt", second_head
    )
    vocab = ["--vocab", str(save_dir)]
    cases = [
        (
            [],
            "has 2 classification heads (bio_sentence, other); an HF model has one: pick it with --head NAME",
        ),
        (
            ["--head", "nope"],
            "--head nope: the checkpoint has no such classification head (it has: bio_sentence, other)",
        ),
        (
            ["--head", "other"],
            "classification head 'other' is not the head of the checkpoint's bio_sentence_prediction "
            "task ('bio_sentence'), whose labels are the only ones the checkpoint saved",
        ),
    ]
    for extra, message in cases:
        with pytest.raises(SystemExit) as exit_info:
            cli_main(
                [
                    "--checkpoint",
                    str(checkpoint),
                    "--out",
                    str(tmp_path / "refused"),
                    *vocab,
                    *extra,
                ]
            )
        error = str(exit_info.value.code)
        assert (
            error.startswith("fairseq-bio-export-hf: ")
            and error.endswith(message)
            and "\n" not in error
        ), error
        assert not (tmp_path / "refused").exists()
    cli_main(
        [
            "--checkpoint",
            str(checkpoint),
            "--out",
            str(tmp_path / "hf"),
            *vocab,
            "--head",
            "bio_sentence",
        ]
    )
    from safetensors.torch import load_file

    exported = load_file(str(tmp_path / "hf" / "model.safetensors"))
    head = checkpoints.load_checkpoint(save_dir / "checkpoint_best.pt")["model"][
        "classification_heads.bio_sentence.dense.weight"
    ]
    assert torch.equal(exported["classifier.dense.weight"], head)
    card = (tmp_path / "hf" / "README.md").read_text()
    assert "- classification head 'other' (--head bio_sentence was exported)" in card
