"""bio_masked_lm's data pipeline on real binarised PubMed: blocks never drop or truncate text,
shards rotate by epoch, masking follows the schedule and is reproducible."""

import pytest
import torch
from fairseq import tasks
from fairseq.data import data_utils
from omegaconf import OmegaConf

import fairseq_bio  # noqa: F401
from fairseq_bio.tasks.bio_masked_lm import BioMaskedLMConfig


def make_task(data, **overrides):
    cfg = OmegaConf.structured(
        BioMaskedLMConfig(
            _name="bio_masked_lm", data=str(data), max_update=100, seed=1, **overrides
        )
    )
    return tasks.setup_task(cfg)


@pytest.mark.parametrize("mode", ["complete", "complete_doc", "eos"])
def test_blocks_keep_every_token(data_bin, mode):
    data = data_bin("bytebpe")
    task = make_task(data, tokens_per_sample=64, sample_break_mode=mode)
    task.load_dataset("valid")
    raw = data_utils.load_indexed_dataset(str(data / "valid"), task.source_dictionary)
    assert (
        raw.sizes.max() > 63
    )  # real sentences longer than a block: they must be split, not dropped
    dataset = task.dataset("valid")
    assert max(dataset.size(i) for i in range(len(dataset))) <= 64
    bos = task.source_dictionary.bos()
    kept = sum(int(dataset[i]["net_input.src_tokens"].ne(bos).sum()) for i in range(len(dataset)))
    expected = int(raw.sizes.sum())  # every token of every sentence, eos included, exactly once ...
    if (
        mode == "complete_doc"
    ):  # ... except the empty lines between documents, which only mark boundaries
        expected -= int((raw.sizes == 1).sum())
    assert kept == expected
    # ... and every held-out block is in a batch, also the last ones fairseq's batch_by_size drops (not a multiple of 8)
    order = dataset.ordered_indices()
    for indices in (
        order,
        order[:5],
    ):  # the whole split; a split of 5 blocks (fairseq: no batch at all)
        batches = dataset.batch_by_size(indices, max_sentences=32, required_batch_size_multiple=8)
        assert sorted(int(i) for b in batches for i in b) == sorted(int(i) for i in indices)


def test_shards_rotate_by_epoch(pubmed_corpus, learned_vocab, tmp_path):
    from fairseq_bio_preprocess.binarize import binarize
    from fairseq_bio_preprocess.encode import encode_files

    vocab = learned_vocab("bytebpe")
    outputs = [tmp_path / "train.bpe", tmp_path / "valid.bpe"]
    encode_files(
        vocab, [pubmed_corpus / "train.txt", pubmed_corpus / "valid.txt"], outputs, progress=False
    )
    data = binarize(vocab, outputs[0], outputs[1], tmp_path / "bin", shards=2)
    task = make_task(data, tokens_per_sample=64, mask_whole_words=True)
    sizes = []
    for epoch in (1, 2, 3):
        task.load_dataset("train", epoch=epoch)
        sizes.append(len(task.dataset("train")))
    assert sizes[0] == sizes[2] != sizes[1]


def test_schedule_and_reproducible_masks(data_bin):
    task = make_task(
        data_bin("wordpiece"),
        tokens_per_sample=64,
        mask_whole_words=True,
        mask_prob_schedule="0.05,0.10,0.15,0.20,0.25",
    )
    assert [task.mask_prob_at(u) for u in (0, 19, 20, 99, 100, 500)] == [
        0.05,
        0.05,
        0.10,
        0.25,
        0.25,
        0.25,
    ]
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    sample = dataset.collater([dataset[i] for i in range(16)])
    a, b = task.mask_sample(sample, 0.15, stream=7), task.mask_sample(sample, 0.15, stream=7)
    c = task.mask_sample(sample, 0.15, stream=8)
    assert torch.equal(a["target"], b["target"]) and not torch.equal(a["target"], c["target"])
    assert torch.equal(
        sample["net_input"]["src_tokens"],
        dataset.collater([dataset[i] for i in range(16)])["net_input"]["src_tokens"],
    )
    low, high = task.mask_sample(sample, 0.05, stream=1), task.mask_sample(sample, 0.25, stream=1)
    assert high["target"].ne(1).sum() > 3 * low["target"].ne(1).sum()


def test_missing_bpe_json_is_a_clear_error(tmp_path, data_bin):
    data = data_bin("bytebpe")
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "dict.txt").write_text((data / "dict.txt").read_text())
    with pytest.raises(ValueError, match=r"bare/bpe.json: not found"):
        make_task(bare, mask_whole_words=True)
    with pytest.raises(FileNotFoundError, match=r"bare/train.bin/.idx: no binarised train split"):
        make_task(bare).load_dataset("train")


def test_head_warmup_trains_only_the_mlm_head_first(data_bin, tiny_encoder, tmp_path):
    """task.head_warmup_updates=3 in a real continued pretraining (fairseq-hydra-train from the tiny
    encoder, 6 updates): after update 3 every encoder weight and the token embeddings (tied to the
    head's output) are still the starting checkpoint's while the head's dense / layer norm / bias
    moved; after update 6 the encoder moved too.
    """
    from conftest import ENCODER_SIZE, run_cli

    from fairseq_bio import runs
    from fairseq_bio.checkpoints import load_checkpoint
    from fairseq_bio.tasks.bio_masked_lm import HEAD_PREFIX

    run_cli(
        runs.hydra_train(
            "bio_roberta_tiny",
            f"task.data={data_bin('bytebpe')}",
            f"checkpoint.finetune_from_model={tiny_encoder}",
            *ENCODER_SIZE,
            "task.head_warmup_updates=3",
            "optimization.max_update=6",
            "optimization.lr=[0.001]",
            "lr_scheduler.warmup_updates=1",
            "checkpoint.save_interval_updates=3",
            "checkpoint.keep_interval_updates=-1",
            "dataset.validate_interval_updates=100000",
            "common.log_interval=1",
            save_dir=tmp_path,
        ),
        cwd=tmp_path,
    )
    start = load_checkpoint(tiny_encoder)["model"]
    at3, at6 = (
        load_checkpoint(tmp_path / name)["model"]
        for name in ("checkpoint_1_3.pt", "checkpoint_last.pt")
    )
    head = [k for k in start if k.startswith(HEAD_PREFIX) and k != HEAD_PREFIX + "weight"]
    body = [k for k in start if not k.startswith(HEAD_PREFIX) and start[k].is_floating_point()]
    assert {"encoder.lm_head.dense.weight", "encoder.lm_head.bias"} <= set(head)
    assert "encoder.sentence_encoder.embed_tokens.weight" in body and len(body) > 20
    assert all(torch.equal(at3[k], start[k]) for k in body)
    assert torch.equal(
        at3[HEAD_PREFIX + "weight"], start["encoder.sentence_encoder.embed_tokens.weight"]
    )  # tied
    assert all(
        not torch.equal(at3[k], start[k]) for k in head if k.endswith(("dense.weight", "bias"))
    )
    assert not torch.equal(
        at6["encoder.sentence_encoder.layers.0.fc1.weight"],
        start["encoder.sentence_encoder.layers.0.fc1.weight"],
    )
    assert not torch.equal(
        at6["encoder.sentence_encoder.embed_tokens.weight"],
        start["encoder.sentence_encoder.embed_tokens.weight"],
    )


def test_freeze_embeddings_keeps_the_token_embeddings_for_the_whole_run(
    data_bin, tiny_encoder, tmp_path
):
    """task.freeze_embeddings=true in a real continued pretraining (3 updates from the tiny encoder,
    a high rate): the token embeddings and the head's output weight tied to them are the start's at
    the end, and fairseq's optimizer holds no state for them; the encoder layers and the head's
    dense / bias moved."""
    from conftest import ENCODER_SIZE, run_cli

    from fairseq_bio import runs
    from fairseq_bio.checkpoints import load_checkpoint

    done = run_cli(
        runs.hydra_train(
            "bio_roberta_tiny",
            f"task.data={data_bin('bytebpe')}",
            f"checkpoint.finetune_from_model={tiny_encoder}",
            *ENCODER_SIZE,
            "task.freeze_embeddings=true",
            "optimization.max_update=3",
            "optimization.lr=[0.001]",
            "lr_scheduler.warmup_updates=1",
            "dataset.validate_interval_updates=100000",
            "common.log_interval=1",
            save_dir=tmp_path,
        ),
        cwd=tmp_path,
    )
    start = load_checkpoint(tiny_encoder)["model"]
    end = load_checkpoint(tmp_path / "checkpoint_last.pt")
    embeddings = "encoder.sentence_encoder.embed_tokens.weight"
    assert torch.equal(end["model"][embeddings], start[embeddings])
    assert torch.equal(end["model"]["encoder.lm_head.weight"], start[embeddings])
    for moved in (
        "encoder.sentence_encoder.layers.0.fc1.weight",
        "encoder.lm_head.dense.weight",
        "encoder.lm_head.bias",
    ):
        assert not torch.equal(end["model"][moved], start[moved]), moved
    parameters = [
        k for k in start if not k.endswith(".version") and k != "encoder.lm_head.weight"
    ]  # tied: one
    optimizer = end["last_optimizer_state"]
    assert (
        len(optimizer["state"])
        == len(optimizer["param_groups"][0]["params"])
        == len(parameters) - 1
    )
    assert (
        "token embeddings frozen (task.freeze_embeddings): " + embeddings
        in done.stdout + done.stderr
    )
