"""PICO words of two elements (PubMedBERT sec. 4.2: "a token may belong to more than one element",
about 3 % of EBM-NLP's PIO words): ``fairseq-bio-convert-tagging ebm-nlp --overlap joint`` keeps
every element of such a word as one joint type (``I-PAR+INT``), the word-level PICO score counts it
for each element (scikit-learn's multi-label F1 as the reference), and bio_tagging trains, validates
and predicts with the joint types on the converted files."""

import random

import pytest
from conftest import logged, run_cli
from helpers.ebm_nlp import EXPECTED_TRAIN_IO, dev_list, write_ebm_release
from helpers.files import read, write
from helpers.hydra_configs import composed
from helpers.trainers import CPU, TINY

from fairseq_bio import runs
from fairseq_bio.metrics.tagging import SpanCounts, element_types, token_counts, token_macro_f1
from fairseq_bio_preprocess.common import PreprocessError
from fairseq_bio_preprocess.ebm_nlp import convert_ebm_nlp

# The tiny release's train documents 101, 102, 104 with every element of their three overlap words
# kept (the fourth, 103's "children", is in devel): 102's "patients" P+O, "insulin" P+I, "lowered"
# I+O (last: OUT, INT, OUT).
JOINT_TRAIN = (
    EXPECTED_TRAIN_IO.replace("patients\tI-OUT", "patients\tI-PAR+OUT")
    .replace("\ninsulin\tI-INT", "\ninsulin\tI-PAR+INT")
    .replace("lowered\tI-OUT", "lowered\tI-INT+OUT")
)


@pytest.fixture
def joint(tmp_path):
    release = write_ebm_release(tmp_path / "ebm_nlp_2_00")
    out = tmp_path / "pico"
    stats = convert_ebm_nlp(release, out, dev_pmids=dev_list(tmp_path, "103"), overlap="joint")
    return out, stats


def test_joint_overlap_keeps_every_element_of_a_word(joint, tmp_path):
    out, stats = joint
    assert read(out / "train.tsv") == JOINT_TRAIN
    assert (
        read(out / "devel.tsv")
        == "Exercise\tI-INT\nhelped\tO\nobese\tI-PAR\nchildren\tI-PAR+INT\n.\tO\n\n"
    )
    assert stats.overlap == "joint" and stats.overlap_words == 4
    assert (
        stats.tagged_words["train"]["I-PAR+INT"] == 1
        and stats.tagged_words["devel"]["I-PAR+INT"] == 1
    )
    bio = tmp_path / "bio"
    convert_ebm_nlp(
        tmp_path / "ebm_nlp_2_00",
        bio,
        dev_pmids=dev_list(tmp_path, "103"),
        overlap="joint",
        scheme="bio",
    )
    words = [line.split("\t")[1] for line in read(bio / "train.tsv").splitlines() if line][10:18]
    assert words == ["B-INT", "O", "B-PAR", "B-PAR+OUT", "B-PAR", "B-PAR+INT", "B-INT+OUT", "B-OUT"]
    with pytest.raises(
        PreprocessError, match=r"^--overlap both: expected last \(BLURB, build_data.py\) or joint$"
    ):
        convert_ebm_nlp(tmp_path / "ebm_nlp_2_00", tmp_path / "x", overlap="both")


def test_joint_words_count_for_each_element_by_hand():
    gold = [["I-PAR", "I-PAR+INT", "O", "I-INT+OUT"]]
    pred = [["I-PAR", "I-INT", "I-OUT", "I-INT+OUT"]]
    assert token_counts(gold, pred) == {
        "INT": SpanCounts(gold=2, pred=2, correct=2),
        "O": SpanCounts(gold=1, pred=0, correct=0),
        "OUT": SpanCounts(gold=1, pred=2, correct=1),
        "PAR": SpanCounts(gold=2, pred=1, correct=1),
    }
    # F1: INT 1, OUT 2/3, PAR 2/3; a label list with joint types is read as their elements
    assert token_macro_f1(gold, pred) == pytest.approx((1 + 2 / 3 + 2 / 3) / 3, abs=1e-15)
    assert token_macro_f1(gold, pred, labels=["PAR", "PAR+INT", "INT+OUT"]) == token_macro_f1(
        gold, pred
    )
    assert element_types(["PAR", "PAR+INT", "INT+OUT", "OUT"]) == ["INT", "OUT", "PAR"]


def test_joint_word_macro_f1_equals_sklearn_multilabel():
    """Random IO sequences over PAR / INT / OUT with 10 % two-element words, predictions perturbed:
    the word-level macro F1 equals sklearn's f1_score(average="macro") over per-element 0/1 columns
    (MultiLabelBinarizer).
    """
    from sklearn.metrics import f1_score
    from sklearn.preprocessing import MultiLabelBinarizer

    rng = random.Random(3)
    tags = ["O"] * 6 + ["I-PAR", "I-INT", "I-OUT"] * 2 + ["I-PAR+INT", "I-INT+OUT"]
    gold = [[rng.choice(tags) for _ in range(rng.randint(3, 30))] for _ in range(200)]
    pred = [[t if rng.random() < 0.7 else rng.choice(tags) for t in s] for s in gold]
    binarizer = MultiLabelBinarizer(classes=["INT", "OUT", "PAR"])
    columns = [
        binarizer.fit_transform([set(t[2:].split("+")) - {""} for s in seqs for t in s])
        for seqs in (gold, pred)
    ]
    expected = f1_score(columns[0], columns[1], average="macro", zero_division=0)
    assert token_macro_f1(gold, pred) == pytest.approx(expected, abs=1e-12)
    assert 0.4 < expected < 0.95


def vocabulary(directory, words):
    """A hand-made uncased WordPiece vocabulary (vocab.txt, dict.txt, bpe.json) of ``words``."""
    write(
        directory / "vocab.txt",
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n",
    )
    write(directory / "dict.txt", "".join(f"{w} {100 - i}\n" for i, w in enumerate(words)))
    write(
        directory / "bpe.json",
        '{"_name": "bert", "bpe_vocab_file": "vocab.txt", "bpe_cased": false}\n',
    )
    return directory


def test_tagger_trains_validates_and_predicts_joint_types(joint, tmp_path):
    """bio_tagging on the joint files: the joint types are classes of the task, the criterion's word
    counts are per element (wgold_PAR counts the PAR+INT words), and a tiny fairseq-hydra-train run
    (random encoder, 4 updates) logs word_macro_f1, which fairseq-bio-predict's scores of the same
    dev file reproduce from its output.
    """
    from fairseq import tasks

    out = (
        tmp_path / "pico-101"
    )  # dev: document 101 (all three elements); train: 102, 103, 104 (the overlap words)
    convert_ebm_nlp(
        tmp_path / "ebm_nlp_2_00", out, dev_pmids=dev_list(tmp_path, "101"), overlap="joint"
    )
    words = sorted(
        {
            line.split("\t")[0].lower()
            for name in ("train", "devel")
            for line in read(out / f"{name}.tsv").splitlines()
            if line
        }
    )
    vocab = vocabulary(tmp_path / "vocab", words)
    save_dir = tmp_path / "run"
    save_dir.mkdir()
    overrides = [
        f"task.data={out}",
        f"task.vocab={vocab}",
        "checkpoint.restore_file=checkpoint_last.pt",
        f"checkpoint.save_dir={save_dir}",
        "checkpoint.best_checkpoint_metric=word_macro_f1",
        *TINY,
        *CPU,
    ]
    task = tasks.setup_task(composed("bio_tagging_ner", *overrides).task)
    assert task.types == ["INT", "INT+OUT", "OUT", "PAR", "PAR+INT", "PAR+OUT"]  # the train file's
    cfg = composed("bio_tagging_ner", *overrides)
    model, criterion = task.build_model(cfg.model), task.build_criterion(cfg.criterion)
    task.load_dataset("train")
    dataset = task.datasets["train"]
    model.eval()
    _, _, log = criterion(model, dataset.collater([dataset[i] for i in range(len(dataset))]))
    assert (log["wgold_PAR"], log["wgold_INT"], log["wgold_OUT"]) == (
        6,
        5,
        3,
    )  # each joint word in each element
    assert not any("+" in key for key in log)

    train_log = save_dir / "train.log"
    run_cli(
        runs.hydra_train(
            "bio_tagging_ner",
            *overrides,
            "optimization.max_update=4",
            "optimization.max_epoch=0",
            "dataset.batch_size=2",
            "optimizer.groups.default.lr_scheduler.warmup_updates=1",
            "common.log_interval=1",
            log=train_log,
        ),
        cwd=save_dir,
    )
    valid = logged(train_log, "valid")
    assert valid and all("word_macro_f1" in entry for entry in valid.values())
    predicted = tmp_path / "pred.tsv"
    run_cli(
        [
            "fairseq-bio-predict",
            "--checkpoint",
            save_dir / "checkpoint_last.pt",
            "--input",
            out / "devel.tsv",
            "--out",
            predicted,
        ],
        cwd=tmp_path,
    )
    rows = [line.split("\t") for line in read(predicted).splitlines() if line]
    assert [row[1] for row in rows] == [
        "I-INT",
        "O",
        "I-OUT",
        "O",
        "I-PAR",
        "I-PAR",
        "O",
        "I-OUT",
        "O",
        "O",
    ]
    assert {row[2].partition("-")[2] for row in rows if row[2] != "O"} <= set(
        task.types
    )  # B-/I- of its types
    gold, pred = [[row[1] for row in rows]], [[row[2] for row in rows]]
    last = valid[max(valid)]
    assert float(last["word_macro_f1"]) == pytest.approx(100 * token_macro_f1(gold, pred), abs=0.01)
