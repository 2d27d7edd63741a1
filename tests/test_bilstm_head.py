"""The BiLSTM tagging head (PubMedBERT Table 10: Bi-LSTM vs a linear layer; task.lstm_layers,
task.lstm_hidden_size, composing with task.crf into BiLSTM-CRF) on bio_roberta (2 layers, 32 wide):
scores equal torch's LSTM run on each unpadded row (so a row's scores do not depend on its batch's
padding), the BiLSTM-CRF loss and Viterbi path equal a brute force over every tag sequence, heads
round-trip through state dicts, and a short fairseq-hydra-train run on real NCBI-disease learns,
predicts as it validated, loads an older linear-head checkpoint without the new options, and is
refused by the HF export in one line."""

import itertools

import pytest
import torch
import torch.nn.functional as F
from conftest import fine_tune, logged
from helpers.small_models import (
    DictionaryTask,
    build,
    make_dictionary,
    tokens,
)  # build: 2 x 32; tokens: 9, 9, 5 long

import fairseq_bio  # noqa: F401
from fairseq_bio.data.tagging_dataset import IGNORE
from fairseq_bio.errors import BioConfigError
from fairseq_bio.modules.tagging_head import TokenClassificationHead, head_options

UPDATES = 150


@pytest.fixture(scope="module")
def task():
    return DictionaryTask(make_dictionary([f"w{i}" for i in range(40)])[0])


def test_bilstm_scores_equal_torch_lstm_on_each_unpadded_row(task):
    """B x T x K scores; each row's are out_proj(LSTM(features)) of that row alone without its
    padding, and equal to the row's scores in a batch of its own (the BiLSTM never reads padding, so
    batching changes nothing).
    """
    model = build(task)
    model.register_tagging_head("tags", 3, lstm_layers=2, lstm_hidden_size=8)
    head = model.classification_heads["tags"]
    assert head.options() == {
        "num_classes": 3,
        "crf": False,
        "lstm_layers": 2,
        "lstm_hidden_size": 8,
        "hidden_layers": 0,
        "hidden_size": 0,
    }
    assert head.out_proj.in_features == 16 and head.lstm.bidirectional
    x = tokens(task)
    scores, _ = model(x, features_only=True, classification_head_name="tags")
    assert scores.shape == (3, 9, 3)
    with torch.no_grad():
        features, _ = model(x, features_only=True)
        for r, n in enumerate((9, 9, 5)):
            reference = head.out_proj(head.lstm(features[r : r + 1, :n])[0])[0]
            assert torch.allclose(scores[r, :n], reference, atol=1e-6)
            alone = model(x[r : r + 1, :n], features_only=True, classification_head_name="tags")[0][
                0
            ]
            assert torch.allclose(scores[r, :n], alone, atol=1e-6)
    assert torch.equal(scores[2, 5:], head.out_proj.bias.expand(4, 3))  # padding: zero states
    scores.sum().backward()
    assert model.encoder.sentence_encoder.layers[0].fc1.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="reads right-padded rows"):
        head(features, padding_mask=x.eq(task.source_dictionary.pad()).flip(1))


def brute_force(emissions, crf):
    """(NLL of every sequence, best sequence) for ``n x K`` emissions by enumerating all K^n tag
    sequences."""
    n, k = emissions.shape

    def score(tags):
        total = (
            crf.start[tags[0]]
            + crf.end[tags[-1]]
            + sum(emissions[i, t] for i, t in enumerate(tags))
        )
        return total + sum(crf.transitions[a, b] for a, b in zip(tags, tags[1:]))

    scores = {tags: score(tags) for tags in itertools.product(range(k), repeat=n)}
    log_z = torch.logsumexp(torch.stack(list(scores.values())), 0)
    return {tags: log_z - s for tags, s in scores.items()}, max(
        scores, key=lambda t: scores[t].item()
    )


@pytest.mark.parametrize("crf", [False, True])
def test_bilstm_loss_and_predictions_equal_a_reference(crf):
    """Loss over the labelled positions: cross-entropy (linear on the BiLSTM) or, with the CRF on
    the BiLSTM's emissions (BiLSTM-CRF), the NLL of each row's labelled positions by brute force;
    predictions: argmax / the brute-force best sequence."""
    torch.manual_seed(3)
    head = TokenClassificationHead(32, 3, crf=crf, lstm_layers=1, lstm_hidden_size=8).eval()
    features = torch.randn(2, 7, 32)
    mask = torch.zeros(2, 7, dtype=torch.bool)
    mask[1, 5:] = True
    scores = head(features, padding_mask=mask)
    target = torch.full((2, 7), IGNORE)
    target[0, [1, 2, 4, 5]] = torch.tensor([0, 1, 2, 2])
    target[1, [1, 3, 4]] = torch.tensor([1, 0, 0])
    loss = head.loss(scores, target, IGNORE)
    positions = target.ne(IGNORE)
    predicted = head.predict(scores.detach(), positions)
    if not crf:
        reference = F.cross_entropy(scores[positions], target[positions], reduction="sum")
        assert loss.item() == pytest.approx(reference.item())
        assert torch.equal(predicted[positions], scores.argmax(-1)[positions])
        return
    expected = 0.0
    for r in range(2):
        nll, best = brute_force(scores[r][positions[r]].detach(), head.crf)
        expected += nll[tuple(target[r][positions[r]].tolist())].item()
        assert tuple(predicted[r][positions[r]].tolist()) == best
    assert loss.item() == pytest.approx(expected, rel=1e-5)


def test_bilstm_heads_round_trip_and_a_head_of_another_shape_is_replaced(task):
    model = build(task)
    model.register_tagging_head("tags", 3, crf=True, lstm_layers=2, lstm_hidden_size=8)
    state = model.state_dict()
    assert (
        head_options(state, "classification_heads.tags.")
        == model.classification_heads["tags"].options()
    )

    fresh = build(task, load_checkpoint_heads=True, seed=1)  # re-created from the state dict alone
    fresh.load_state_dict(dict(state), strict=True)
    assert (
        fresh.classification_heads["tags"].options() == model.classification_heads["tags"].options()
    )
    x = tokens(task)
    assert torch.equal(
        model(x, classification_head_name="tags")[0], fresh(x, classification_head_name="tags")[0]
    )

    linear = build(task, seed=2)  # the current model's head differs (no BiLSTM): it keeps its own
    linear.register_tagging_head("tags", 3, crf=True)
    before = linear.classification_heads["tags"].out_proj.weight.clone()
    linear.load_state_dict(dict(state), strict=True)
    assert linear.classification_heads["tags"].lstm is None
    assert torch.equal(linear.classification_heads["tags"].out_proj.weight, before)


def test_bad_lstm_options_fail_in_one_line(task):
    from fairseq_bio.tasks.bio_tagging import BioTaggingConfig, BioTaggingTask

    for options, message in (
        (
            {"lstm_hidden_size": 8},
            "task.lstm_hidden_size=8 sizes a BiLSTM: set task.lstm_layers >= 1 too",
        ),
        ({"lstm_layers": -1}, "task.lstm_layers=-1, task.lstm_hidden_size=0: must be >= 0"),
    ):
        with pytest.raises(BioConfigError) as error:
            BioTaggingTask(
                BioTaggingConfig(data="x", **options), task.source_dictionary, None, "vocab", None
            )
        assert str(error.value) == message


# -------------------------------------------------------------------------------- end to end on real NCBI-disease


@pytest.fixture(scope="module")
def bilstm_run(tiny_encoder, ncbi_slice, tmp_path_factory):
    """(save_dir, json log) of bio_tagging_ner with task.lstm_layers=1 task.crf=true (BiLSTM-CRF, 64
    per direction: half the encoder's 128) on the real NCBI-disease slice, 150 updates of 16 at lr
    1e-3 from the tiny encoder.
    """
    save_dir = tmp_path_factory.mktemp("bilstm")
    log = fine_tune(
        ncbi_slice,
        save_dir,
        f"checkpoint.restore_file={tiny_encoder}",
        "task.lstm_layers=1",
        "task.crf=true",
        "optimizer.groups.default.lr_float=0.001",
        updates=UPDATES,
    )
    return save_dir, log


def test_bilstm_crf_learns_on_real_ncbi_and_predicts_as_it_validated(
    bilstm_run, ncbi_slice, tmp_path
):
    """Train and dev loss fall and dev entity F1 ends far above an untagged model's 0 (measured
    here: 31.0 after 150 updates; the linear head: 14.4 after 100 at lr 5e-4). Tagging the dev file
    with fairseq-bio-predict's code (other batches) gives the F1 the run logged for the same
    checkpoint."""
    from fairseq_bio.checkpoints import load_checkpoint
    from fairseq_bio.inference.tagging import load_tagger, predict_conll

    save_dir, log = bilstm_run
    valid, train = logged(log, "valid"), logged(log, "train_inner")
    assert float(valid[max(valid)]["loss"]) < float(valid[min(valid)]["loss"])
    assert float(train[max(train)]["loss"]) < float(train[min(train)]["loss"])
    assert float(valid[UPDATES]["f1"]) > 15.0
    state = load_checkpoint(save_dir / "checkpoint_last.pt")
    assert (
        state["cfg"]["task"]["lstm_layers"] == 1 and state["cfg"]["task"]["lstm_hidden_size"] == 0
    )
    assert state["model"]["classification_heads.bio_tagging.lstm.weight_hh_l0"].shape == (
        4 * 64,
        64,
    )

    task, model = load_tagger(str(save_dir / "checkpoint_last.pt"), cpu=True)
    assert model.classification_heads["bio_tagging"].options() == {
        "num_classes": 3,
        "crf": True,
        "lstm_layers": 1,
        "lstm_hidden_size": 64,
        "hidden_layers": 0,
        "hidden_size": 0,
    }
    scores = predict_conll(
        task, model, str(ncbi_slice / "devel.tsv"), str(tmp_path / "dev.tsv"), progress=False
    )
    assert 100 * scores["f1"] == pytest.approx(float(valid[UPDATES]["f1"]), abs=0.01)


def test_older_linear_head_checkpoint_without_the_options_still_loads(bilstm_run, tmp_path):
    """A checkpoint from before the options (no task.lstm_* in its config, a linear head's
    parameters: the run's checkpoint with those taken out) loads with a linear head, as it was
    trained."""
    from fairseq_bio.checkpoints import load_checkpoint
    from fairseq_bio.inference.tagging import load_tagger

    save_dir, _ = bilstm_run
    state = load_checkpoint(save_dir / "checkpoint_last.pt")
    for key in ("lstm_layers", "lstm_hidden_size"):
        del state["cfg"]["task"][key]
    prefix = "classification_heads.bio_tagging."
    for key in [k for k in state["model"] if k.startswith(prefix + "lstm.")]:
        del state["model"][key]
    state["model"][prefix + "out_proj.weight"] = torch.randn(3, 128)
    old = tmp_path / "old" / "checkpoint_old.pt"
    old.parent.mkdir()
    torch.save(state, old)
    for name in ("dict.txt", "bpe.json", "encoder.json", "vocab.bpe"):
        (old.parent / name).write_bytes((save_dir / name).read_bytes())
    task, model = load_tagger(str(old), cpu=True)
    head = model.classification_heads["bio_tagging"]
    assert task.cfg.lstm_layers == 0 and head.lstm is None and head.crf is not None
    assert torch.equal(head.out_proj.weight, state["model"][prefix + "out_proj.weight"])


def test_hf_export_refuses_the_bilstm_head_in_one_line(bilstm_run, tmp_path):
    from fairseq_bio.hf import HFConvertError, export_hf

    with pytest.raises(
        HFConvertError,
        match=r"token head 'bio_tagging' has a BiLSTM \(task.lstm_layers=1\): not "
        "exported: HF's token-classification models have no LSTM layer; fairseq-bio-predict serves "
        "this checkpoint",
    ) as error:
        export_hf(bilstm_run[0] / "checkpoint_last.pt", tmp_path / "hf")
    assert "\n" not in str(error.value) and not (tmp_path / "hf").exists()
