"""Bad input around checkpoints (fairseq_bio.checkpoint_fit): no training run writes over the
checkpoint it starts from or its teacher; a dictionary of the same size but other content than the
one a checkpoint was trained with is refused by fine-tuning, resume, prediction and export; a shard,
an unconsolidated FSDP state, an archive that is not a checkpoint, a data-bin of another size and
another architecture are each one line naming the file; an HF model with fewer positions than the
check sentences imports. Every refusal leaves its inputs byte-identical."""

import hashlib
import io
import random
import shutil
import tarfile
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import ENCODER_SIZE, ENCODER_UPDATES, FINE_TUNE, run_cli

from fairseq_bio import checkpoint_fit, checkpoints, runs
from fairseq_bio.errors import BioConfigError


def digests(*paths) -> dict:
    """sha256 of every file under ``paths`` (files or directories)."""
    found = {}
    for path in map(Path, paths):
        for file in [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()):
            found[str(file)] = hashlib.sha256(file.read_bytes()).hexdigest()
    return found


def refusal(result) -> str:
    """The one line a refused command printed (status != 0, no traceback)."""
    assert result.returncode != 0, result.stdout[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-4000:]
    lines = result.stderr.strip().splitlines()
    assert lines, result.stdout[-2000:]
    return lines[-1]


def copy_vocab(src_dir: Path, dest: Path, swap=None) -> Path:
    """dict.txt, bpe.json and the BPE files of ``src_dir`` in ``dest``; ``swap``: two dict.txt lines
    (1-based) exchanged, so the dictionary keeps its size but two ids mean each other's token."""
    dest.mkdir(parents=True, exist_ok=True)
    for file in src_dir.iterdir():
        if file.is_file() and not file.name.endswith((".pt", ".log", ".bin", ".idx")):
            shutil.copy(file, dest / file.name)
    if swap:
        swap_lines(dest / "dict.txt", *swap)
    return dest


def swap_lines(dict_file: Path, a: int, b: int) -> None:
    lines = dict_file.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[a - 1], lines[b - 1] = lines[b - 1], lines[a - 1]
    dict_file.write_text("".join(lines), encoding="utf-8")


def symbols(dict_file: Path, line: int) -> str:
    return dict_file.read_text(encoding="utf-8").splitlines()[line - 1].rsplit(" ", 1)[0]


# ----------------------------------------------------------------------------- no run writes over what it reads


def test_a_fine_tune_into_its_encoders_folder_is_refused_and_the_encoder_kept(
    tiny_encoder, ncbi_slice, tmp_path
):
    folder = tmp_path / "runs" / "demo" / "checkpoints"
    folder.mkdir(parents=True)
    encoder = folder / "checkpoint_best.pt"
    shutil.copy(tiny_encoder, encoder)
    before = digests(encoder)
    command = runs.hydra_train(
        "bio_tagging_ner",
        f"task.data={ncbi_slice}",
        f"checkpoint.restore_file={encoder}",
        "optimization.max_update=2",
        *FINE_TUNE,
        save_dir=folder,
    )
    result = run_cli(command, cwd=tmp_path, check=False)
    line = refusal(result)
    assert line.startswith(
        f"checkpoint.save_dir={folder}: holds checkpoint.restore_file={encoder}, which this run "
        "would write over"
    )
    # refused before the task wrote anything there (no encoded/ cache, no vocabulary; hydra/ is
    # hydra's own record)
    assert digests(encoder) == before
    assert sorted(p.name for p in folder.iterdir() if p.name != "hydra") == ["checkpoint_best.pt"]


def _checkpoint(path: Path, task: str = "bio_masked_lm") -> Path:
    torch.save(
        {"cfg": {"task": {"_name": task}, "model": {}}, "model": {}, "extra_state": {}}, path
    )
    return path


def test_what_a_run_may_and_may_not_write_over(tmp_path):
    """Names fairseq writes into save_dir are refused for a new run's start, teacher or a link to
    them; other names, other folders and a run resuming itself are not."""
    save = tmp_path / "save"
    save.mkdir()
    for name in (
        "checkpoint_best.pt",
        "checkpoint_last.pt",
        "checkpoint3.pt",
        "checkpoint_2_500.pt",
        "checkpoint.best_loss_1.2345.pt",
    ):
        assert checkpoint_fit.written_by_fairseq(save / name, save), name
    for name in ("model.pt", "encoder.pt", "checkpoint_best_old.pt", "checkpoint_last.pt.bak"):
        assert not checkpoint_fit.written_by_fairseq(save / name, save), name
    assert not checkpoint_fit.written_by_fairseq(tmp_path / "checkpoint_best.pt", save)
    link = tmp_path / "teacher.pt"
    link.symlink_to(_checkpoint(save / "checkpoint_best.pt"))
    assert checkpoint_fit.written_by_fairseq(link, save)
    assert checkpoint_fit.written_by_fairseq(
        save / "checkpoint_last-shard0.pt", save, suffix="-shard0"
    )

    def cfg(**given):
        options = dict(
            restore_file="checkpoint_last.pt",
            finetune_from_model=None,
            save_dir=str(save),
            reset_optimizer=False,
            reset_lr_scheduler=False,
            reset_meters=False,
            reset_dataloader=False,
        )
        return SimpleNamespace(**{**options, **given})

    own = _checkpoint(save / "checkpoint_2_500.pt")
    best = save / "checkpoint_best.pt"
    # fairseq's resume, and a restore of one of the run's own checkpoints without resets: the same
    # run
    _checkpoint(save / "checkpoint_last.pt")
    assert checkpoint_fit.check_start_kept(cfg(), "bio_masked_lm")[0] == str(
        save / "checkpoint_last.pt"
    )
    assert checkpoint_fit.check_start_kept(cfg(restore_file=str(own)), "bio_masked_lm")[0] == str(
        own
    )
    checkpoint_fit.check_start_kept(
        cfg(restore_file=str(save / "model.pt")), "bio_tagging"
    )  # not fairseq's name
    refused = {
        "reset flags": cfg(restore_file=str(best), reset_optimizer=True),
        "another task": cfg(restore_file=str(best)),
        "finetune_from_model": cfg(finetune_from_model=str(best)),
    }
    (save / "checkpoint_last.pt").unlink()
    for why, given in refused.items():
        with pytest.raises(
            BioConfigError, match=r"^checkpoint\.save_dir=.*: holds checkpoint\."
        ) as e:
            checkpoint_fit.check_start_kept(
                given, "bio_tagging" if why == "another task" else "bio_masked_lm"
            )
        assert str(best) in str(e.value), why
    with pytest.raises(BioConfigError, match=r"holds criterion\.teacher="):
        checkpoint_fit.check_start_kept(cfg(), "bio_masked_lm", {"criterion.teacher": str(link)})


def test_a_distillation_into_its_teachers_folder_is_refused_before_training(tmp_path):
    """The plugin's load_checkpoint wrapper asks the criterion what it reads (``reads``): the
    teacher."""
    from fairseq_bio.criterions.bio_distillation import BioDistillationCriterion

    save = tmp_path / "teacher"
    save.mkdir()
    teacher = _checkpoint(save / "checkpoint_best.pt")
    criterion = SimpleNamespace(
        reads=BioDistillationCriterion.reads.fget(
            SimpleNamespace(cfg=SimpleNamespace(teacher=str(teacher)))
        )
    )
    trainer = SimpleNamespace(
        checkpoint_suffix="",
        get_criterion=lambda: criterion,
        task=SimpleNamespace(cfg=SimpleNamespace(_name="bio_masked_lm")),
    )
    cfg = SimpleNamespace(
        restore_file="checkpoint_last.pt", finetune_from_model=None, save_dir=str(save)
    )
    with pytest.raises(
        BioConfigError, match=rf"holds criterion\.teacher={teacher}, which this run would"
    ):
        checkpoint_fit.check_run_start(cfg, trainer)


# ------------------------------------------------------------------------------- vocabularies checked by content


def test_predict_with_a_same_size_shuffled_vocabulary_is_refused(ner_model, ncbi_slice, tmp_path):
    save_dir, _ = ner_model
    checkpoint = save_dir / "checkpoint_best.pt"
    vocab = copy_vocab(save_dir, tmp_path / "shuffled", swap=(10, 11))
    assert len((vocab / "dict.txt").read_text().splitlines()) == len(
        (save_dir / "dict.txt").read_text().splitlines()
    )
    out = tmp_path / "pred.tsv"
    before = digests(checkpoint, vocab, ncbi_slice / "test.tsv")
    result = run_cli(
        [
            "fairseq-bio-predict",
            "--checkpoint",
            checkpoint,
            "--vocab",
            vocab,
            "--input",
            ncbi_slice / "test.tsv",
            "--out",
            out,
        ],
        cwd=tmp_path,
        check=False,
    )
    line = refusal(result)
    recorded = checkpoints.load_checkpoint(checkpoint)["extra_state"][checkpoint_fit.RECORD]["file"]
    ours, theirs = symbols(save_dir / "dict.txt", 10), symbols(vocab / "dict.txt", 10)
    assert line == (
        f"fairseq-bio-predict: {checkpoint}: was trained with {recorded}, which differs from {vocab / 'dict.txt'}: "
        f"symbol 13 (line 10) is {ours!r} in the checkpoint's and {theirs!r} in {vocab / 'dict.txt'} (each token id "
        "would mean another token)"
    )
    assert digests(checkpoint, vocab, ncbi_slice / "test.tsv") == before and not out.exists()


def test_fine_tuning_from_an_encoder_with_a_same_size_shuffled_vocabulary_is_refused(
    tiny_encoder, data_bin, tmp_path
):
    """task.vocab of the same size but other content; and an encoder without the record (older): its
    data-bin's."""
    from fairseq_bio.tasks import fine_tuning

    vocab = copy_vocab(data_bin("bytebpe"), tmp_path / "vocab", swap=(20, 30))
    dictionary, _ = fine_tuning.load_vocab(str(vocab))
    with pytest.raises(BioConfigError) as e:
        fine_tuning.check_encoder_fits(str(tiny_encoder), dictionary, str(vocab))
    assert str(e.value).startswith(
        f"{tiny_encoder}: was pretrained with {data_bin('bytebpe') / 'dict.txt'}, which "
        f"differs from {vocab / 'dict.txt'}: symbol 23 (line 20)"
    )
    older = checkpoints.load_checkpoint(tiny_encoder)
    del older["extra_state"][checkpoint_fit.RECORD]
    torch.save(older, tmp_path / "older.pt")
    with pytest.raises(BioConfigError, match="was pretrained with .*dict.txt, which differs from"):
        fine_tuning.check_encoder_fits(str(tmp_path / "older.pt"), dictionary, str(vocab))
    same, _ = fine_tuning.load_vocab(str(data_bin("bytebpe")))
    fine_tuning.check_encoder_fits(str(tmp_path / "older.pt"), same, str(data_bin("bytebpe")))


@pytest.fixture
def resumable(tiny_encoder, data_bin, tmp_path):
    """A copy of the tiny encoder's pretraining run (its checkpoint_last.pt in a save_dir of its
    own) and a command line resuming it for a few more updates."""
    save = tmp_path / "run"
    save.mkdir()
    shutil.copy(tiny_encoder, save / "checkpoint_last.pt")

    def resume(data, *overrides):
        return run_cli(
            runs.hydra_train(
                "bio_roberta_tiny",
                f"task.data={data}",
                *ENCODER_SIZE,
                f"optimization.max_update={ENCODER_UPDATES + 2}",
                *overrides,
                save_dir=save,
            ),
            cwd=tmp_path,
            check=False,
        )

    return save, resume


def rebinarised(data_bin: Path, dest: Path, swap=None, drop_last=False) -> Path:
    """The data-bin as if binarised again with another dictionary (its .bin/.idx kept)."""
    shutil.copytree(data_bin, dest)
    if swap:
        swap_lines(dest / "dict.txt", *swap)
    if drop_last:
        lines = (dest / "dict.txt").read_text(encoding="utf-8").splitlines(keepends=True)
        (dest / "dict.txt").write_text("".join(lines[:-1]), encoding="utf-8")
    return dest


def test_resume_after_rebinarising_is_refused_in_one_line(resumable, data_bin, tmp_path):
    """A permuted dictionary of the same size, one of another size, another architecture: each one
    line naming the checkpoint, before any update; the run's checkpoint is untouched."""
    save, resume = resumable
    last = save / "checkpoint_last.pt"
    before = digests(last)
    permuted = rebinarised(data_bin("bytebpe"), tmp_path / "permuted", swap=(5, 6))
    line = refusal(resume(permuted))
    assert line.startswith(
        f"{last}: was trained with {data_bin('bytebpe') / 'dict.txt'}, which differs from "
        f"{permuted / 'dict.txt'}: symbol 8 (line 5) is "
    )
    smaller = rebinarised(data_bin("bytebpe"), tmp_path / "smaller", drop_last=True)
    line = refusal(resume(smaller))
    assert line.startswith(f"{last}: was trained with ") and f"{smaller / 'dict.txt'}" in line
    assert "the checkpoint's has " in line
    line = refusal(resume(data_bin("bytebpe"), "model.encoder_layers=3"))
    assert line.startswith(f"{last}: built with another architecture than this run's model: ")
    assert "model.encoder_layers=3 here, 2 in it" in line
    assert digests(last) == before and sorted(
        p.name for p in save.iterdir() if p.name != "hydra"
    ) == [last.name]


def test_a_data_bin_of_another_size_without_the_record_is_one_line(resumable, data_bin, tmp_path):
    """An older checkpoint (no record) whose data-bin was binarised again in place with a smaller
    dictionary: fairseq's "please ensure that the architectures match" traceback becomes one
    line."""
    save, resume = resumable
    last = save / "checkpoint_last.pt"
    smaller = rebinarised(data_bin("bytebpe"), tmp_path / "smaller", drop_last=True)
    older = checkpoints.load_checkpoint(last)
    del older["extra_state"][checkpoint_fit.RECORD]
    older["cfg"]["task"]["data"] = str(
        smaller
    )  # re-binarised where it was: no other dict.txt to compare with
    torch.save(older, last)
    before = digests(last)
    line = refusal(resume(smaller))
    assert (
        line.startswith(f"{last}: its embeddings have ") and f"from {smaller / 'dict.txt'}" in line
    )
    assert digests(last) == before


# ---------------------------------------------------------------------------------------- shards and archives


def shard_of(checkpoint: Path, dest: Path) -> Path:
    """The first of two shards of ``checkpoint``'s model, each tensor cut along its first dimension
    (what one rank of a sharded run holds), with its vocabulary beside it."""
    copy_vocab(checkpoint.parent, dest)
    state = checkpoints.load_checkpoint(checkpoint)
    state["model"] = {k: v.chunk(2)[0].clone() if v.dim() else v for k, v in state["model"].items()}
    torch.save(state, dest / "checkpoint_best.pt")
    return dest / "checkpoint_best.pt"


def test_a_shard_given_to_export_predict_or_fine_tuning_is_one_line(
    ner_model, ncbi_slice, tmp_path
):
    from fairseq_bio.inference.loading import load_fine_tuned
    from fairseq_bio.files import InputError
    from fairseq_bio.tasks import fine_tuning

    save_dir, _ = ner_model
    shard = shard_of(save_dir / "checkpoint_best.pt", tmp_path / "shard")
    before = digests(shard.parent)
    result = run_cli(
        ["fairseq-bio-export-hf", "--checkpoint", shard, "--out", tmp_path / "hf"],
        cwd=tmp_path,
        check=False,
    )
    line = refusal(result)
    assert line.startswith(
        f"fairseq-bio-export-hf: {shard}: one shard of a model, not a whole one ("
    )
    assert "consolidate the shards" in line and not (tmp_path / "hf").exists()
    with pytest.raises(InputError, match=rf"^{shard}: one shard of a model, not a whole one"):
        load_fine_tuned(str(shard), cpu=True)
    dictionary, _ = fine_tuning.load_vocab(str(shard.parent))
    with pytest.raises(
        BioConfigError, match="one shard of a model"
    ) as e:  # not "another vocabulary"
        fine_tuning.check_encoder_fits(str(shard), dictionary, str(shard.parent))
    assert "vocabulary" not in str(e.value)
    # fairscale's unconsolidated state: flat parameters and their metadata
    state = checkpoints.load_checkpoint(shard)
    state["model"] = {"_fsdp_wrapped_module.flat_param_0": torch.zeros(8)}
    state["fsdp_metadata"] = {"param_metadata": []}
    flat = tmp_path / "shard" / "checkpoint_last.pt"
    torch.save(state, flat)
    with pytest.raises(InputError, match=r"an unconsolidated fully sharded \(FSDP\) state"):
        load_fine_tuned(str(flat), cpu=True)
    flat.unlink()
    assert digests(shard.parent) == before


def _zip(path: Path) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("notes/readme.txt", "not a model\n")


def _tar(path: Path) -> None:
    with tarfile.open(path, "w") as archive:
        data = b"not a model\n"
        info = tarfile.TarInfo("readme.txt")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))


ARCHIVES = {
    "zip": (
        _zip,
        "not a PyTorch checkpoint (a zip archive without torch's data.pkl; it holds notes/readme.txt)",
    ),
    "tar": (_tar, "not a PyTorch checkpoint ("),
    # not starting with 0x80, which torch's legacy pickle format starts with
    "random bytes": (
        lambda path: path.write_bytes(b"\x00" + random.Random(0).randbytes(4095)),
        "not a PyTorch checkpoint (4,096 bytes",
    ),
}


def test_an_archive_named_checkpoint_best_is_one_line(ner_model, ncbi_slice, tmp_path):
    from fairseq_bio.checkpoints import CorruptCheckpointError
    from fairseq_bio.inference.loading import load_fine_tuned
    from fairseq_bio.tasks import fine_tuning

    save_dir, _ = ner_model
    for kind, (write, problem) in ARCHIVES.items():
        folder = copy_vocab(save_dir, tmp_path / kind.replace(" ", "-"))
        fake = folder / "checkpoint_best.pt"
        write(fake)
        with pytest.raises(CorruptCheckpointError) as e:
            load_fine_tuned(str(fake), cpu=True)
        assert str(e.value).startswith(f"{fake}: corrupt checkpoint, {problem}"), kind
        with pytest.raises(
            CorruptCheckpointError
        ):  # fine-tuning from it: when its save_dir is checked
            fine_tuning.check_encoder_fits(str(fake), None, str(folder))
    fake = tmp_path / "zip" / "checkpoint_best.pt"
    before = digests(fake.parent)
    result = run_cli(
        [
            "fairseq-bio-predict",
            "--checkpoint",
            fake,
            "--input",
            ncbi_slice / "test.tsv",
            "--out",
            tmp_path / "pred.tsv",
        ],
        cwd=tmp_path,
        check=False,
    )
    assert (
        refusal(result)
        == f"fairseq-bio-predict: {fake}: corrupt checkpoint, {ARCHIVES['zip'][1]}; copy it "
        "again from where it came from, or name another one"
    )
    assert digests(fake.parent) == before and not (tmp_path / "pred.tsv").exists()


# ------------------------------------------------------------------------------------------------ HF import


def test_an_hf_model_with_fewer_positions_than_the_check_sentences_imports(learned_vocab, tmp_path):
    """The check sentences (about 30 tokens) are compared on their first 16 tokens; the import
    records its dictionary, which a later run compares with the one it is given."""
    transformers = pytest.importorskip("transformers")
    from fairseq_bio.hf import import_hf
    from fairseq_bio.hf.verify import CHECK_PAIRS, CHECK_SENTENCES

    hf, vocab = tmp_path / "hf", learned_vocab("wordpiece")
    tokenizer = transformers.BertTokenizer(vocab=str(vocab / "vocab.txt"), do_lower_case=True)
    config = transformers.BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=16,
    )
    transformers.BertForMaskedLM(config).save_pretrained(hf)
    tokenizer.save_pretrained(hf)
    shutil.copy(vocab / "vocab.txt", hf)  # transformers 5 writes tokenizer.json only
    info = import_hf(hf, tmp_path / "imported", log=lambda line: None)
    positions = info["model"]["max_positions"]
    # a BERT has token types: its pairs are checked too, cut to the same 16 tokens
    assert info["model"]["token_types"] == 2
    checked = len(CHECK_SENTENCES) + len(CHECK_PAIRS)
    assert positions <= 16 and info["check"]["tokens"] == positions * checked
    state = checkpoints.load_checkpoint(tmp_path / "imported" / "model.pt")
    record = state["extra_state"][checkpoint_fit.RECORD]
    assert (
        record["file"] == str(tmp_path / "imported" / "dict.txt")
        and record["symbols"][-1] == "<mask>"
    )
    assert record["size"] == len(record["symbols"]) == checkpoint_fit.embedding_rows(state)
