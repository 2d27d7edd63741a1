"""NER fine-tuning end to end on real NCBI-disease, through fairseq-hydra-train, fairseq-validate
and fairseq-bio-predict: fine-tuning learns, predictions cover every token, the printed F1 is the
criterion's, bad input fails in one line, fine-tuned checkpoints load with weights_only=True, CRF
and layer-wise lr decay run."""

import json
import re

import pytest
import torch
from conftest import fine_tune, logged, run_cli

from fairseq_bio import runs
from fairseq_bio.checkpoints import FAIRSEQ_SAFE_GLOBALS, load_checkpoint


def best_valid_f1(log):
    return max(float(entry["f1"]) for entry in logged(log, "valid").values())


def test_fine_tuning_learns_on_real_ncbi(ner_model):
    """Dev loss falls and dev entity F1 ends far above an untrained tagger's (which finds no
    entity).

    Pretrained vs random initialisation is asserted in test_tagging_margin.py, with an encoder
    pretrained longer than the shared 400-update one (26.0 vs 23.1 dev F1 here is too close to
    assert)."""
    _, log = ner_model
    valid = logged(log, "valid")
    updates = sorted(valid)
    assert float(valid[updates[-1]]["loss"]) < float(valid[updates[0]]["loss"])
    assert best_valid_f1(log) > 15.0
    train = logged(log, "train_inner")
    assert float(train[max(train)]["loss"]) < float(train[min(train)]["loss"])


def test_fine_tuned_directory_is_self_contained(ner_model):
    save_dir, log = ner_model
    for name in (
        "checkpoint_best.pt",
        "checkpoint_last.pt",
        "dict.txt",
        "bpe.json",
        "encoder.json",
        "vocab.bpe",
    ):
        assert (save_dir / name).exists(), name
    state = load_checkpoint(save_dir / "checkpoint_best.pt")
    assert state["task_state"]["labels"] == ["O", "B-Disease", "I-Disease"]
    assert (
        state["cfg"]["model"]["encoder_layers"] == 2
    )  # taken from the encoder checkpoint, not the config
    assert list((save_dir / "tensorboard").rglob("events.out.tfevents.*"))
    valid = logged(log, "valid")
    assert all(
        {"precision", "recall", "f1", "accuracy", "word_macro_f1"} <= set(v) for v in valid.values()
    )


def test_fine_tuned_checkpoints_load_with_weights_only(ner_model):
    save_dir, _ = ner_model
    allowed = {f"{g.__module__}.{g.__qualname__}" for g in FAIRSEQ_SAFE_GLOBALS} | {"typing.Any"}
    for name in ("checkpoint_best.pt", "checkpoint_last.pt"):
        unsafe = set(torch.serialization.get_unsafe_globals_in_checkpoint(save_dir / name))
        assert unsafe <= allowed, unsafe - allowed
        load_checkpoint(save_dir / name)


def test_predict_conll_round_trip_and_f1_equals_the_criterion(ner_model, ncbi_slice, tmp_path):
    save_dir, _ = ner_model
    ckpt = save_dir / "checkpoint_best.pt"
    out = tmp_path / "pred.tsv"
    printed = run_cli(
        [
            "fairseq-bio-predict",
            "--checkpoint",
            ckpt,
            "--input",
            ncbi_slice / "test.tsv",
            "--out",
            out,
        ],
        cwd=tmp_path,
    ).stdout
    gold_lines = (ncbi_slice / "test.tsv").read_text(encoding="utf-8").splitlines()
    pred_lines = out.read_text(encoding="utf-8").splitlines()
    assert len(pred_lines) == len(gold_lines)
    for g, p in zip(gold_lines, pred_lines):
        if not g:
            assert not p
            continue
        token, tag = g.split("\t")
        p_token, p_gold, p_pred = p.split("\t")
        assert (p_token, p_gold) == (token, tag) and p_pred in ("O", "B-Disease", "I-Disease")
    f1 = float(re.search(r"F1 ([\d.]+)", printed).group(1))

    # The criterion's corpus-level test F1 as fairseq-validate prints it (its default
    # required_batch_size_multiple of 8 made fairseq drop the last, longest sentences before the
    # task kept every example).
    validated = run_cli(
        runs.validate(
            ncbi_slice,
            "--task",
            "bio_tagging",
            "--path",
            ckpt,
            "--valid-subset",
            "test",
            "--batch-size",
            "16",
            "--cpu",
        ),
        cwd=tmp_path,
    )
    summary = [
        line
        for line in (validated.stdout + validated.stderr).splitlines()
        if "valid on 'test' subset" in line
    ][-1]
    assert int(re.search(r"word_total (\d+)", summary).group(1)) == sum(
        1 for line in gold_lines if line
    )
    assert f1 == float(re.search(r"\| f1 ([\d.]+)", summary).group(1))  # both rounded to 2 decimals


def test_predict_raw_text_gives_character_spans(ner_model, ncbi_slice, tmp_path):
    save_dir, _ = ner_model
    sentences = []
    for block in (ncbi_slice / "test.tsv").read_text(encoding="utf-8").split("\n\n")[:40]:
        sentences.append(" ".join(line.split("\t")[0] for line in block.splitlines()))
    notes = tmp_path / "notes.txt"
    documents = [" ".join(sentences[i : i + 4]) for i in range(0, 40, 4)]
    notes.write_text("\n".join(documents) + "\n", encoding="utf-8")
    out = tmp_path / "spans.jsonl"
    printed = run_cli(
        [
            "fairseq-bio-predict",
            "--checkpoint",
            save_dir / "checkpoint_best.pt",
            "--input",
            notes,
            "--out",
            out,
        ],
        cwd=tmp_path,
    ).stdout
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["line"] for r in records] == list(range(1, len(documents) + 1))
    spans = [s for r in records for s in r["spans"]]
    assert spans and f"{len(spans)} entity spans" in printed
    for record, document in zip(records, documents):
        for span in record["spans"]:
            assert (
                document[span["start"] : span["end"]] == span["text"] and span["type"] == "Disease"
            )


def test_unknown_test_label_is_a_one_line_error_and_nothing_is_written(ner_model, tmp_path):
    save_dir, _ = ner_model
    bad = tmp_path / "test.tsv"
    bad.write_text("Mild\tO\nanemia\tB-Disease\n\ncisplatin\tB-Chemical\n", encoding="utf-8")
    out = tmp_path / "pred.tsv"
    result = run_cli(
        [
            "fairseq-bio-predict",
            "--checkpoint",
            save_dir / "checkpoint_best.pt",
            "--input",
            bad,
            "--out",
            out,
        ],
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert (
        last.startswith(f"fairseq-bio-predict: {bad}:4: tag 'B-Chemical'")
        and "make them O in the file" in last
    )
    assert not out.exists() and list(tmp_path.iterdir()) == [bad]


def test_missing_split_and_foreign_vocabulary_are_refused(
    tiny_encoder, ncbi_slice, learned_vocab, tmp_path
):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.tsv").write_text(
        (ncbi_slice / "train.tsv").read_text(encoding="utf-8"), encoding="utf-8"
    )
    result = run_cli(
        runs.hydra_train(
            "bio_tagging_ner",
            f"task.data={data}",
            f"checkpoint.restore_file={tiny_encoder}",
            save_dir=tmp_path / "a",
        ),
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode != 0 and f"{data}/devel.tsv: not found" in result.stderr
    result = run_cli(
        runs.hydra_train(
            "bio_tagging_ner",
            f"task.data={ncbi_slice}",
            f"checkpoint.restore_file={tiny_encoder}",
            f"task.vocab={learned_vocab('wordpiece')}",
            save_dir=tmp_path / "b",
        ),
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode != 0
    assert re.search(
        rf"{re.escape(str(tiny_encoder))}: (its embeddings have|was pretrained with)", result.stderr
    )


def test_crf_and_layer_wise_lr_decay(tiny_encoder, ncbi_slice, tmp_path):
    """A CRF head with BIO constraints under LLRD 0.8 and task.head_lr_scale=10: per-layer learning
    rates 0.8^k of the top one, the head's 10 x what LLRD gives it; Viterbi predictions are
    well-formed BIO."""
    log = fine_tune(
        ncbi_slice,
        tmp_path,
        f"checkpoint.restore_file={tiny_encoder}",
        "task.crf=true",
        "task.layer_lr_decay=0.8",
        "task.head_lr_scale=10",
        "common.log_interval=1",
        updates=12,
    )
    entry = logged(log, "train_inner")[6]  # mid-schedule (the lr reaches 0 at the last update)
    lrs = sorted((float(v) for k, v in entry.items() if k.startswith("lr_")), reverse=True)
    # heads, 2 layers, embeddings, each twice: with weight decay and without (biases, LayerNorm
    # weights; the recipe's task.exempt_from_weight_decay)
    assert len(lrs) == 8 and lrs[-1] > 0
    top = lrs[0] / 10  # the head's rate without its scale: LLRD's 1
    for k in range(4):
        assert (
            lrs[2 * k]
            == pytest.approx(top * 0.8**k * (10 if k == 0 else 1), rel=1e-3)
            == lrs[2 * k + 1]
        )
    state = load_checkpoint(tmp_path / "checkpoint_last.pt")
    assert "classification_heads.bio_tagging.crf.transitions" in state["model"]
    out = tmp_path / "pred.tsv"
    run_cli(
        [
            "fairseq-bio-predict",
            "--checkpoint",
            tmp_path / "checkpoint_last.pt",
            "--input",
            ncbi_slice / "test.tsv",
            "--out",
            out,
        ],
        cwd=tmp_path,
    )
    previous = "O"
    for line in out.read_text(encoding="utf-8").splitlines():
        tag = line.split("\t")[-1] if line else "O"
        assert not (tag.startswith("I-") and previous == "O")
        previous = tag
