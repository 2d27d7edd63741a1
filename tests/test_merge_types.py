"""task.merge_types (PubMedBERT sec. 4.1: JNLPBA's five entity types scored as one): the renaming as
files are read, on a hand-made two-type CoNLL file, through the task's labels and the criterion's
counts, and in a tiny real run."""

import re
from pathlib import Path

import pytest
from conftest import logged, run_cli
from helpers.files import write
from helpers.hydra_configs import composed
from helpers.trainers import CPU, TINY

from fairseq_bio import runs
from fairseq_bio.checkpoints import load_checkpoint
from fairseq_bio.data.conll import TaggingDataError, merge_types, parse_type_merge, read_conll
from fairseq_bio.errors import BioConfigError
from fairseq_bio.metrics.tagging import get_entities

# JNLPBA-like: protein, DNA and cell_type; "NF kappa B" is read by conlleval as a protein then a DNA
# entity (the type changes at an I- tag), which must stay two entities once both are "entity".
TRAIN = """\
IL\tB-protein
-\tI-protein
2\tI-protein
gene\tB-DNA
expression\tO
in\tO
T\tB-cell_type
cells\tI-cell_type
.\tO

NF\tB-protein
kappa\tI-protein
B\tI-DNA
binds\tO
IL\tB-DNA
-\tI-DNA
2\tI-DNA
.\tO

"""
DEVEL = "T\tB-cell_type\ncells\tI-cell_type\nbind\tO\nNF\tB-protein\nkappa\tI-protein\nB\tI-protein\n.\tO\n\n"
MERGED_TRAIN = [
    ["B-entity", "I-entity", "I-entity", "B-entity", "O", "O", "B-entity", "I-entity", "O"],
    ["B-entity", "I-entity", "B-entity", "O", "B-entity", "I-entity", "I-entity", "O"],
]


def test_parse_type_merge_forms_and_errors():
    assert parse_type_merge("") is None and parse_type_merge("  ") is None
    assert parse_type_merge("entity")("protein") == "entity"
    rename = parse_type_merge("DNA=gene, RNA=gene")
    assert (rename("DNA"), rename("RNA"), rename("protein")) == ("gene", "gene", "protein")
    for spec, message in [
        ("a b", "expected one type name"),
        ("a,b", "expected one type name"),
        ("DNA=", "'DNA=' is not OLD=NEW"),
        ("DNA=gene,RNA", "'RNA' is not OLD=NEW"),
        ("DNA=gene,DNA=x", "type 'DNA' is renamed twice"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_type_merge(spec)


def test_merge_keeps_every_entity_and_its_span(tmp_path):
    sentences = read_conll(write(tmp_path / "train.tsv", TRAIN))
    before = [get_entities(s.tags) for s in sentences]
    renamed = merge_types(sentences, parse_type_merge("entity"))
    assert [s.tags for s in sentences] == MERGED_TRAIN
    assert [[(start, end) for _, start, end in get_entities(s.tags)] for s in sentences] == [
        [(start, end) for _, start, end in entities] for entities in before
    ]
    assert renamed == {("protein", "entity"): 2, ("DNA", "entity"): 3, ("cell_type", "entity"): 1}
    sentences = read_conll(tmp_path / "train.tsv")
    merge_types(
        sentences, parse_type_merge("DNA=protein")
    )  # a mapping renames only the types it lists
    assert sentences[1].tags == [
        "B-protein",
        "I-protein",
        "B-protein",
        "O",
        "B-protein",
        "I-protein",
        "I-protein",
        "O",
    ]
    assert sentences[0].tags[6:8] == ["B-cell_type", "I-cell_type"]


def vocabulary(directory: Path) -> Path:
    """A hand-made WordPiece vocabulary (vocab.txt, dict.txt, bpe.json) covering the words of the
    files above."""
    words = sorted({line.split("\t")[0].lower() for line in (TRAIN + DEVEL).splitlines() if line})
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


@pytest.fixture
def data(tmp_path):
    write(tmp_path / "data" / "train.tsv", TRAIN)
    write(tmp_path / "data" / "devel.tsv", DEVEL)
    return tmp_path / "data", vocabulary(tmp_path / "vocab")


def tagging_overrides(data_dir, vocab_dir, save_dir, *more):
    return [
        f"task.data={data_dir}",
        f"task.vocab={vocab_dir}",
        "checkpoint.restore_file=checkpoint_last.pt",
        f"checkpoint.save_dir={save_dir}",
        *TINY,
        *CPU,
        *more,
    ]


def test_task_labels_and_criterion_counts_see_merged_types(data, tmp_path):
    from fairseq import tasks

    data_dir, vocab_dir = data
    cfg = composed(
        "bio_tagging_ner",
        *tagging_overrides(data_dir, vocab_dir, tmp_path, "task.merge_types=entity"),
    )
    task = tasks.setup_task(cfg.task)
    assert task.labels == ["O", "B-entity", "I-entity"] and task.types == ["entity"]
    model, criterion = task.build_model(cfg.model), task.build_criterion(
        cfg.criterion
    )  # the model sets the windows
    task.load_dataset("valid")
    dataset = task.datasets["valid"]
    assert dataset.gold_tags == [
        ["B-entity", "I-entity", "O", "B-entity", "I-entity", "I-entity", "O"]
    ]
    model.eval()
    _, _, log = criterion(model, dataset.collater([dataset[i] for i in range(len(dataset))]))
    assert log["span_gold"] == 2 and log["wgold_entity"] == 5
    assert not any(key.startswith("wgold_") and key != "wgold_entity" for key in log)

    unmerged = tasks.setup_task(
        composed("bio_tagging_ner", *tagging_overrides(data_dir, vocab_dir, tmp_path)).task
    )
    assert unmerged.types == ["DNA", "cell_type", "protein"]
    bad = composed(
        "bio_tagging_ner",
        *tagging_overrides(data_dir, vocab_dir, tmp_path, "task.merge_types='a b'"),
    )
    with pytest.raises(
        BioConfigError, match=r"^task.merge_types='a b': 'a b': expected one type name"
    ):
        tasks.setup_task(bad.task)


def test_one_name_types_bare_biobert_tags(data, tmp_path):
    """BioBERT's NER files (bio-lm's BC4CHEMD, LINNAEUS, Species-800) tag B/I/O with no type:
    refused as they are, read with task.merge_types=NAME (the entities as they were, each typed
    NAME)."""
    from fairseq import tasks

    data_dir, vocab_dir = data
    write(data_dir / "train.tsv", re.sub(r"\t([BI])-\S+", r"\t\1", TRAIN))
    bare = read_conll(data_dir / "train.tsv")
    assert bare[1].tags == [
        "B",
        "I",
        "I",
        "O",
        "B",
        "I",
        "I",
        "O",
    ]  # conlleval: one entity "NF kappa B"
    cfg = composed(
        "bio_tagging_ner",
        *tagging_overrides(data_dir, vocab_dir, tmp_path, "task.merge_types=Species"),
    )
    task = tasks.setup_task(cfg.task)
    assert task.labels == ["O", "B-Species", "I-Species"]
    merge_types(bare, parse_type_merge("Species"))
    assert bare[1].tags == [
        "B-Species",
        "I-Species",
        "I-Species",
        "O",
        "B-Species",
        "I-Species",
        "I-Species",
        "O",
    ]
    plain = composed("bio_tagging_ner", *tagging_overrides(data_dir, vocab_dir, tmp_path))
    with pytest.raises(
        TaggingDataError, match=r"train\.tsv:1: tag 'B' is neither .*need task\.merge_types=NAME$"
    ):
        tasks.setup_task(plain.task)
    mapping = composed(
        "bio_tagging_ner",
        *tagging_overrides(data_dir, vocab_dir, tmp_path, "task.merge_types='B=x'"),
    )
    with pytest.raises(TaggingDataError, match=r"train\.tsv:1: tag 'B' is neither"):
        tasks.setup_task(mapping.task)  # a mapping renames typed entities only


def test_tiny_run_trains_scores_and_predicts_merged_types(data, tmp_path):
    """fairseq-hydra-train on the two-type files with task.merge_types=entity (a tiny random
    encoder, 4 updates): the checkpoint's labels, the validation metrics and fairseq-bio-predict's
    gold column are the merged ones.
    """
    data_dir, vocab_dir = data
    save_dir, log = tmp_path / "run", tmp_path / "run" / "train.log"
    save_dir.mkdir()
    overrides = tagging_overrides(data_dir, vocab_dir, save_dir, "task.merge_types=entity")
    run_cli(
        runs.hydra_train(
            "bio_tagging_ner",
            *overrides,
            "optimization.max_update=4",
            "optimization.max_epoch=0",
            "dataset.batch_size=2",
            "optimizer.groups.default.lr_scheduler.warmup_updates=1",
            "common.log_interval=1",
            log=log,
        ),
        cwd=save_dir,
    )
    state = load_checkpoint(save_dir / "checkpoint_last.pt")
    assert state["task_state"]["labels"] == ["O", "B-entity", "I-entity"]
    assert state["cfg"]["task"]["merge_types"] == "entity"
    valid = logged(log, "valid")
    assert valid and all("f1" in entry for entry in valid.values())
    out = tmp_path / "pred.tsv"
    run_cli(
        [
            "fairseq-bio-predict",
            "--checkpoint",
            save_dir / "checkpoint_last.pt",
            "--input",
            data_dir / "devel.tsv",
            "--out",
            out,
        ],
        cwd=tmp_path,
    )
    gold = [line.split("\t")[1] for line in out.read_text(encoding="utf-8").splitlines() if line]
    assert gold == ["B-entity", "I-entity", "O", "B-entity", "I-entity", "I-entity", "O"]
