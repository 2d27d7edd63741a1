"""Entity markers for relation extraction (PubMedBERT Table 12,
task.entity_representation=marker_start) on real GAD and DDI rows: their placeholders become
character offsets, [E1] [/E1] [E2] [/E2] wrap exactly the entities' pieces (byte-level BPE and
WordPiece), the dictionary grows by exactly those four tokens whose embedding rows start as the mean
of the encoder's, the head reads the states at the start markers, a short fairseq-hydra-train run
trains and reloads for fairseq-bio-predict (TSV placeholders or JSON-lines offsets alike), HF export
refuses in one line, and bad entities fail in one line naming file and line."""

import hashlib
import json

import pytest
import torch
from conftest import REPO, SHARED_DATA, fine_tune_sentence, logged, run_cli

from fairseq_bio.data.sentence_files import (
    ENTITY_MARKERS,
    Entity,
    SentenceDataError,
    attach_entities,
    entity_rows,
    marked_words,
    read_jsonl,
    read_tsv,
    write_jsonl,
)
from fairseq_bio.data.sentence_windows import (
    MarkerWordEncoder,
    SentencePredictionDataset,
    WindowError,
)
from fairseq_bio.data.tagging_dataset import EncodedWords, WordEncoder
from fairseq_bio.modules.entity_head import entity_start_positions

GAD, DDI = SHARED_DATA / "re" / "GAD", SHARED_DATA / "re" / "DDI"
GAD_PLACEHOLDERS, DDI_PLACEHOLDERS = ["@GENE$", "@DISEASE$"], ["@DRUG$", "@DRUG-DRUG$"]


def real_rows(path, n, fmt="tsv"):
    """The first ``n`` labelled rows of a real RE file, read as the task reads it."""
    if fmt == "tsv":
        return read_tsv(str(path), ["sentence"], "label")[:n]
    return read_jsonl(str(path), ["sentence"], "label", "id")[:n]


def test_placeholders_of_real_gad_and_ddi_rows_become_entity_offsets(tmp_path):
    """The converter: each real row's two placeholders, in text order, are its entities (DDI's
    @DRUG-DRUG$, one mention that is both drugs, is E1 and E2 at once); written as JSON lines and
    read back, the offsets are the same and mark the same text."""
    gad = real_rows(GAD / "train.tsv", 300)
    ddi = [ex for ex in real_rows(DDI / "dev.json", 2496, "jsonl") if "@DRUG-DRUG$" in ex.texts[0]][
        :3
    ]
    ddi += real_rows(DDI / "dev.json", 100, "jsonl")
    attach_entities(gad, "gad", GAD_PLACEHOLDERS)
    attach_entities(ddi, "ddi", DDI_PLACEHOLDERS)
    for ex in gad:
        e1, e2 = ex.entities
        assert {ex.texts[0][e.start : e.end] for e in ex.entities} == {"@GENE$", "@DISEASE$"}
        assert e1.end <= e2.start and {e1.type, e2.type} == {"GENE", "DISEASE"}
    assert [ex.entities[0] == ex.entities[1] for ex in ddi[:3]] == [True] * 3
    assert all(ex.texts[0][e.start : e.end] == "@DRUG$" for ex in ddi[3:] for e in ex.entities)

    dest = tmp_path / "gad.jsonl"
    write_jsonl(entity_rows(gad), str(dest))
    back = read_jsonl(str(dest), ["sentence"], "label", "id", "entities")
    attach_entities(back, str(dest), [])  # offsets only: no placeholders to fall back on
    assert [(b.texts, b.label, b.entities) for b in back] == [
        (g.texts, g.label, g.entities) for g in gad
    ]
    assert json.loads(dest.read_text().splitlines()[0])["entities"][0] == {
        "start": gad[0].entities[0].start,
        "end": gad[0].entities[0].end,
        "type": gad[0].entities[0].type,
    }


@pytest.mark.parametrize("kind", ["bytebpe", "wordpiece"])
def test_markers_wrap_exactly_the_entity_pieces(kind, learned_vocab):
    """With the vocabulary's own BPE, the pieces between [E1] and [/E1] (and [E2], [/E2]) are the
    placeholder's pieces, and with the markers taken out a row is the unmarked text's encoding when
    no word was cut.
    """
    from fairseq_bio.tasks.fine_tuning import load_vocab

    dictionary, spec = load_vocab(str(learned_vocab(kind)))
    words = WordEncoder(dictionary, spec)
    ids = {m: len(dictionary) + i for i, m in enumerate(ENTITY_MARKERS)}
    marker = MarkerWordEncoder(words, ids)
    rows = real_rows(GAD / "train.tsv", 200)
    attach_entities(rows, "gad", GAD_PLACEHOLDERS)
    whole = 0
    for ex in rows:
        marked = [
            p for w in marker.encode_sentence(marked_words(ex.texts[0], ex.entities)) for p in w
        ]
        for k, entity in enumerate(ex.entities):
            start, end = marked.index(ids[ENTITY_MARKERS[2 * k]]), marked.index(
                ids[ENTITY_MARKERS[2 * k + 1]]
            )
            first = entity.start == len(ex.texts[0]) - len(ex.texts[0].lstrip())
            assert marked[start + 1 : end] == words.encode(
                ex.texts[0][entity.start : entity.end], first
            )
        if all(ex.texts[0][e.start : e.end] in ex.texts[0].split() for e in ex.entities):
            whole += 1
            plain = [p for w in words.encode_sentence(ex.texts[0].split()) for p in w]
            assert [p for p in marked if p not in ids.values()] == plain
    assert whole > 50  # most rows have both placeholders as words of their own


def test_entity_start_window_is_centred_and_a_relation_is_never_cut():
    """A marked text longer than the window becomes the one window centred on its markers (both
    start markers in it, found where the head reads them); markers that alone need more than a
    window are refused, never cut.
    """
    from helpers.small_models import make_dictionary

    words = [f"w{i}" for i in range(60)]
    dictionary, _ = make_dictionary(words + list(ENTITY_MARKERS))
    encoder = MarkerWordEncoder(
        _Symbols(dictionary), {m: dictionary.index(m) for m in ENTITY_MARKERS}
    )
    near = words[:30] + ["[E1]", "w30", "[/E1]", "w31", "w32", "[E2]", "w33", "[/E2]"] + words[34:]
    dataset = SentencePredictionDataset(
        [EncodedWords.encode(encoder, [near])], dictionary, 16, focus=[(30, 37)]
    )
    assert dataset.plans[0][1] == [
        (27, 41)
    ]  # 8 marker-span words, then 3 on the left and 3 on the right
    tokens = dataset.collater([dataset[0]])["net_input"]["src_tokens"]
    assert tokens.shape == (1, 16)
    starts = entity_start_positions(tokens, [dictionary.index("[E1]"), dictionary.index("[E2]")])
    assert starts.tolist() == [[1 + 3, 1 + 3 + 5]] and tokens[0, 1].item() == dictionary.index(
        "w27"
    )
    far = ["[E1]", "w0", "[/E1]"] + words[1:40] + ["[E2]", "w40", "[/E2]"]
    with pytest.raises(
        WindowError, match=f"the entity markers span {len(far)} pieces, more than one window of 16"
    ):
        SentencePredictionDataset(
            [EncodedWords.encode(encoder, [far])], dictionary, 16, focus=[(0, len(far) - 1)]
        )


class _Symbols:
    """A word encoder for a dictionary whose symbols are the words (one piece per word)."""

    def __init__(self, dictionary):
        self.dictionary = dictionary

    def encode(self, word, first):
        return [self.dictionary.index(word)]


# ------------------------------------------------------------------------------------------ end to end on real GAD


@pytest.fixture(scope="module")
def markers_run(tiny_encoder, tmp_path_factory):
    """(save_dir, json log, data dir, encoder sha256 before) of sentence_task=re_gad_markers on a
    real GAD slice: 300 train rows, and 100 later train rows as dev (both labels); 30 updates from
    the tiny pretrained encoder.
    """
    data = tmp_path_factory.mktemp("gad-markers")
    lines = (GAD / "train.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
    (data / "train.tsv").write_text("".join(lines[:300]), encoding="utf-8")
    (data / "dev.tsv").write_text("".join(lines[4000:4100]), encoding="utf-8")
    before = hashlib.sha256(tiny_encoder.read_bytes()).hexdigest()
    save_dir = tmp_path_factory.mktemp("markers")
    log = fine_tune_sentence(
        "re_gad_markers",
        data,
        save_dir,
        f"checkpoint.restore_file={tiny_encoder}",
        "task.valid_file=dev.tsv",
        "task.valid_from_train=0",
        updates=30,
    )
    return save_dir, log, data, before


def test_marker_checkpoint_carries_the_grown_dictionary_and_the_encoder_is_unchanged(
    markers_run, tiny_encoder
):
    from fairseq_bio.checkpoints import load_checkpoint

    save_dir, log, _, before = markers_run
    assert hashlib.sha256(tiny_encoder.read_bytes()).hexdigest() == before
    encoder, tuned = load_checkpoint(tiny_encoder), load_checkpoint(save_dir / "checkpoint_last.pt")
    key = "encoder.sentence_encoder.embed_tokens.weight"
    rows = encoder["model"][key].shape[0]
    assert tuned["model"][key].shape == (rows + 4, 128) and tuned["model"][
        "encoder.lm_head.bias"
    ].shape == (rows + 4,)
    assert tuned["task_state"] == {
        "labels": ["0", "1"],
        "kind": "classification",
        "entity_markers": list(ENTITY_MARKERS),
    }
    assert tuned["model"]["classification_heads.bio_sentence.dense.weight"].shape == (128, 2 * 128)
    assert tuned["cfg"]["task"]["entity_representation"] == "marker_start"
    valid = logged(log, "valid")
    assert max(valid) == 30 and {"f1", "accuracy", "macro_f1"} <= set(valid[30])


@pytest.fixture(scope="module")
def loaded(markers_run):
    """(task, model) of the run's last checkpoint through fairseq-bio-predict's loader."""
    from fairseq_bio.inference.loading import load_fine_tuned

    return load_fine_tuned(str(markers_run[0] / "checkpoint_last.pt"), cpu=True)


def test_restoring_the_encoder_adds_mean_rows_and_the_head_reads_the_start_markers(
    markers_run, tiny_encoder
):
    """The model has the encoder's rows plus one per marker; restoring the encoder checkpoint (what
    fairseq-hydra-train does at the start) keeps its rows and gives each marker the mean of its rows
    (padding left out). The head's input is the concatenated top states at [E1] and [E2]: pooling
    equals that computed by hand.
    """
    from fairseq_bio.inference.loading import load_fine_tuned
    from fairseq_bio.checkpoints import load_checkpoint
    from fairseq_bio.criterions.bio_sentence_prediction import BioSentencePredictionCriterion

    task, model = load_fine_tuned(
        str(markers_run[0] / "checkpoint_last.pt"), cpu=True
    )  # its weights are replaced
    base = len(task.dictionary)
    assert len(task.source_dictionary) == base + 4
    assert [task.source_dictionary[base + i] for i in range(4)] == list(ENTITY_MARKERS)
    assert [task.source_dictionary[i] for i in range(base)] == [
        task.dictionary[i] for i in range(base)
    ]
    weights = load_checkpoint(tiny_encoder)["model"]
    model.load_state_dict(weights, strict=True)
    embed = model.encoder.sentence_encoder.embed_tokens.weight.detach()
    old = weights["encoder.sentence_encoder.embed_tokens.weight"]
    keep = torch.arange(base) != task.dictionary.pad()
    assert torch.equal(embed[:base], old) and torch.allclose(
        embed[base:], old[keep].mean(0).expand(4, -1)
    )
    assert model.encoder.lm_head.weight is model.encoder.sentence_encoder.embed_tokens.weight

    examples = task.read_split("valid")
    dataset = task.build_dataset(examples[:8], shuffle=False)
    sample = dataset.collater([dataset[i] for i in range(8)])
    tokens = sample["net_input"]["src_tokens"]
    starts = entity_start_positions(tokens, task.start_marker_ids)
    assert (tokens.gather(1, starts) == torch.tensor(task.start_marker_ids)).all()
    head = model.classification_heads["bio_sentence"]
    with torch.no_grad():
        pooled = BioSentencePredictionCriterion(None, task).pool(model, sample)
        features, _ = model(**sample["net_input"], features_only=True)
        rows = torch.arange(8).unsqueeze(1)
        by_hand = head.out_proj(torch.tanh(head.dense(features[rows, starts].flatten(1))))
    assert torch.allclose(pooled, by_hand, atol=1e-6)


def test_predict_reloads_the_marker_model_from_placeholders_or_offsets(
    markers_run, loaded, tmp_path
):
    """fairseq-bio-predict on the dev TSV prints the dev metrics the training run logged for the
    same checkpoint; the same rows as JSON lines with entity offsets (the converter's output) get
    the same predictions.
    """
    from fairseq_bio.inference.sentence_level import predict_sentence_file

    save_dir, log, data, _ = markers_run
    out = tmp_path / "pred.jsonl"
    printed = run_cli(
        [
            "fairseq-bio-predict",
            "--checkpoint",
            save_dir / "checkpoint_last.pt",
            "--input",
            data / "dev.tsv",
            "--out",
            out,
            "--cpu",
            "--no-progress",
        ],
        cwd=tmp_path,
    ).stdout
    last = printed.strip().splitlines()[-1].split()
    metrics = dict(zip(last[::2], map(float, last[1::2])))
    valid = logged(log, "valid")[30]
    for key in ("accuracy", "macro_f1", "precision", "recall", "f1"):
        assert metrics[key] == pytest.approx(float(valid[key]), abs=0.01), key
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 100

    task, model = loaded
    examples = read_tsv(str(data / "dev.tsv"), ["sentence"], "label")
    attach_entities(examples, "dev", GAD_PLACEHOLDERS)
    offsets = tmp_path / "dev.jsonl"
    write_jsonl(entity_rows(examples), str(offsets))
    scores = predict_sentence_file(
        task, model, str(offsets), str(tmp_path / "pred2.jsonl"), progress=False
    )
    again = [json.loads(line) for line in (tmp_path / "pred2.jsonl").read_text().splitlines()]
    assert [r["pred"] for r in again] == [r["pred"] for r in rows]
    assert all(
        a["probabilities"]["1"] == pytest.approx(r["probabilities"]["1"], abs=1e-5)
        for a, r in zip(again, rows)
    )
    assert scores["f1"] == pytest.approx(metrics["f1"], abs=0.01)


def test_hf_export_refuses_marker_models_in_one_line(markers_run, tmp_path):
    from fairseq_bio.hf import HFConvertError, export_hf

    with pytest.raises(
        HFConvertError,
        match=r"task.entity_representation=marker_start: not exported: .* pools "
        "entity-start states; fairseq-bio-predict serves this checkpoint",
    ) as error:
        export_hf(markers_run[0] / "checkpoint_last.pt", tmp_path / "hf")
    assert "\n" not in str(error.value) and not (tmp_path / "hf").exists()


BAD = {  # entities field -> the one-line error
    '[{"start": 0, "end": 4}, {"start": 10, "end": 999}]': "entity 2: offsets 10-999 lie outside the text",
    '[{"start": 0, "end": 8}, {"start": 4, "end": 12}]': "entities overlap: 0-8 and 4-12",
    '[{"start": 0, "end": 4}]': "entities: 1 entities; entity markers need a list of the relation's two",
    '[{"start": 0, "end": 4}, {"start": 5, "end": 8}, {"start": 9, "end": 12}]': "entities: 3 entities",
    '[{"start": "0", "end": 4}, {"start": 5, "end": 8}]': "entity 1: start '0' and end 4 must be integers",
}


@pytest.mark.parametrize("entities", sorted(BAD))
def test_bad_entities_fail_in_one_line_naming_file_and_line(loaded, entities, tmp_path):
    from fairseq_bio.inference.sentence_level import read_examples

    task, _ = loaded
    bad = tmp_path / "bad.jsonl"
    good = '{"id": "a", "sentence": "Mutations in @GENE$ cause @DISEASE$ .", "label": "1"}\n'
    bad.write_text(
        good
        + f'{{"id": "b", "sentence": "BRCA1 variants and breast cancer risk", "entities": {entities}}}\n'
    )
    with pytest.raises(SentenceDataError) as error:
        read_examples(task, str(bad))
    assert str(error.value).startswith(f"{bad}:2: {BAD[entities]}") and "\n" not in str(error.value)


def test_missing_entities_marker_words_and_windows_fail_in_one_line(loaded, tmp_path):
    """A row with neither offsets nor placeholders, a row whose text has the word [E1], and a
    relation whose markers need more than one window (predicted: nothing written)."""
    from fairseq_bio.inference.sentence_level import predict_sentence_file, read_examples

    task, _ = loaded
    plain = tmp_path / "plain.tsv"
    plain.write_text(
        "Mutations in @GENE$ cause @DISEASE$ .\t1\nBRCA1 variants and breast cancer risk\t0\n"
    )
    with pytest.raises(
        SentenceDataError, match=rf"^{plain}:2: entity placeholders none; a relation's row holds"
    ):
        read_examples(task, str(plain))
    plain.write_text("Mutations in @GENE$ cause @DISEASE$ [E1] .\t1\n")
    with pytest.raises(
        SentenceDataError, match=rf"^{plain}:1: the text has the word '\[E1\]', an entity marker$"
    ):
        read_examples(task, str(plain))
    far = tmp_path / "far.tsv"
    filler = " ".join(["the"] * 200)
    far.write_text(f"@GENE$ is linked to @DISEASE$ .\t1\n@GENE$ {filler} @DISEASE$ .\t0\n")
    with pytest.raises(SentenceDataError) as error:
        predict_sentence_file(*loaded, str(far), str(tmp_path / "far.jsonl"), progress=False)
    assert str(error.value).startswith(f"{far}:2: the entity markers span ") and str(
        error.value
    ).endswith(
        "more than one window of 128 tokens holds (task.max_positions); a relation is never cut"
    )
    assert not (tmp_path / "far.jsonl").exists()
