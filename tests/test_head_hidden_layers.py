"""Fully connected hidden layers before the classifier (task.head_hidden_layers / head_hidden_size /
head_dropout, BioMegatron Tables 1-2): shapes of the token and sentence heads on a 2-layer, 32-wide
bio_roberta, the head's shape read back from a state dict, 0 = the heads as before, and a short
fine-tune through fairseq-hydra-train with the BioMegatron preset on real NCBI-disease."""

import pytest
import torch
from conftest import SHARED_DATA, fine_tune, fine_tune_sentence, logged, run_cli
from fairseq.models.roberta.model import RobertaClassificationHead
from helpers.small_models import small_model, small_task

import fairseq_bio  # noqa: F401
from fairseq_bio.checkpoints import load_checkpoint
from fairseq_bio.modules.sentence_head import SentenceClassificationHead
from fairseq_bio.modules.tagging_head import TokenClassificationHead, head_options


@pytest.fixture(scope="module")
def task():
    return small_task()


def build(task, **kwargs):
    return small_model(task, **kwargs)


def tokens(task, rows=3, length=9):
    d = task.source_dictionary
    t = torch.randint(
        d.nspecial, len(d) - 1, (rows, length), generator=torch.Generator().manual_seed(1)
    )
    t[:, 0], t[:, -1] = d.bos(), d.eos()
    return t


@pytest.mark.parametrize("lstm_layers", [0, 1])
def test_token_head_hidden_layers_shapes_and_options(task, lstm_layers):
    model = build(task)
    options = dict(
        lstm_layers=lstm_layers,
        lstm_hidden_size=8 if lstm_layers else 0,
        hidden_layers=2,
        hidden_size=24,
    )
    model.register_tagging_head("tags", 5, dropout=0.5, **options)
    head = model.classification_heads["tags"]
    assert [tuple(layer.weight.shape) for layer in head.hidden] == [
        (24, 16 if lstm_layers else 32),
        (24, 24),
    ]
    assert tuple(head.out_proj.weight.shape) == (5, 24)
    scores, _ = model(tokens(task), features_only=True, classification_head_name="tags")
    assert scores.shape == (3, 9, 5)
    state = model.state_dict()
    assert (
        head_options(state, "classification_heads.tags.")
        == head.options()
        == {"num_classes": 5, "crf": False, **options}
    )
    # a checkpoint with such a head re-registers it, weights and all, where heads are loaded from
    # checkpoints
    other = build(task, load_checkpoint_heads=True)
    other.load_state_dict(
        state
    )  # fairseq's load path: upgrade_state_dict_named registers the head first
    assert other.classification_heads["tags"].options() == head.options()
    assert torch.equal(other.classification_heads["tags"].hidden[1].weight, head.hidden[1].weight)


def test_token_head_without_hidden_layers_is_the_linear_head(task):
    """hidden_layers=0 (the default): no new parameters, no random numbers drawn, the same scores as
    before."""
    torch.manual_seed(3)
    plain = TokenClassificationHead(32, 4, dropout=0.1)
    torch.manual_seed(3)
    zero = TokenClassificationHead(32, 4, dropout=0.1, hidden_layers=0, hidden_size=0)
    assert list(plain.state_dict()) == ["out_proj.weight", "out_proj.bias"]
    assert all(
        torch.equal(a, b) for a, b in zip(plain.state_dict().values(), zero.state_dict().values())
    )
    assert head_options(zero.state_dict(), "")["hidden_layers"] == 0
    with pytest.raises(ValueError, match="hidden_size"):
        TokenClassificationHead(32, 4, hidden_layers=1, hidden_size=0)


def test_sentence_head_hidden_layers(task):
    torch.manual_seed(5)
    fairseq_head = RobertaClassificationHead(32, 32, 3, "tanh", 0.1).eval()
    torch.manual_seed(5)
    zero = SentenceClassificationHead(32, 3, "tanh", 0.1).eval()
    features = torch.randn(4, 7, 32)
    assert list(zero.state_dict()) == list(fairseq_head.state_dict())
    assert torch.equal(zero(features), fairseq_head(features))  # 0 hidden layers: fairseq's head
    head = SentenceClassificationHead(32, 3, "tanh", 0.5, hidden_layers=2, hidden_size=16)
    assert [tuple(layer.weight.shape) for layer in head.hidden] == [(16, 32), (16, 16)]
    assert head(features).shape == (4, 3) and tuple(head.out_proj.weight.shape) == (3, 16)
    assert (head.dense.out_features, head.out_proj.weight.size(0)) == (
        32,
        3,
    )  # what fairseq's loading reads


def test_biomegatron_preset_fine_tunes_and_predicts(tiny_encoder, ncbi_slice, tmp_path):
    """recipe=finetune_biomegatron (its hidden layer narrowed for the tiny encoder) trains a few
    updates on real NCBI-disease, saves the hidden layers, and fairseq-bio-predict reloads them. Its
    paper table labels every sub-token on a dataset other than NCBI-disease (BioMegatron sec. 5.1:
    the slice's folder names no dataset), and prediction still gives one tag per word, in order."""
    save = tmp_path / "ner"
    save.mkdir()
    log = fine_tune(
        ncbi_slice,
        save,
        f"checkpoint.restore_file={tiny_encoder}",
        "recipe=finetune_biomegatron",
        "task.head_hidden_size=16",
        "task.max_positions=64",
        updates=8,
    )
    assert max(logged(log, "train")) == 8
    state = load_checkpoint(save / "checkpoint_best.pt")
    params = state["model"]
    assert params["classification_heads.bio_tagging.hidden.0.weight"].size(0) == 16
    assert (
        state["cfg"]["task"]["head_dropout"] == 0.5
        and state["cfg"]["task"]["head_hidden_layers"] == 1
    )
    assert state["cfg"]["task"]["label_all_subtokens"] is True
    out = tmp_path / "pred.tsv"
    run_cli(
        [
            "fairseq-bio-predict",
            "--checkpoint",
            save / "checkpoint_best.pt",
            "--input",
            ncbi_slice / "devel.tsv",
            "--out",
            out,
            "--no-progress",
        ],
        cwd=tmp_path,
    )
    gold = [l.split("\t")[0] for l in (ncbi_slice / "devel.tsv").read_text().splitlines() if l]
    predicted = [l.split("\t") for l in out.read_text().splitlines() if l]
    assert [p[0] for p in predicted] == gold  # one line per word, in order
    assert {p[-1] for p in predicted} <= {"O", "B-Disease", "I-Disease"}


def test_sentence_head_hidden_layers_fine_tune(tiny_encoder, tmp_path):
    """bio_sentence_prediction with task.head_hidden_layers trains a few updates on real GAD (160
    rows)."""
    rows = (SHARED_DATA / "re" / "GAD" / "train.tsv").read_text(encoding="utf-8").splitlines()
    data = tmp_path / "gad"
    data.mkdir()
    (data / "train.tsv").write_text("\n".join(rows[:160]) + "\n", encoding="utf-8")
    test = (SHARED_DATA / "re" / "GAD" / "test.tsv").read_text(encoding="utf-8").splitlines()
    (data / "test.tsv").write_text("\n".join(test[:41]) + "\n", encoding="utf-8")
    log = fine_tune_sentence(
        "re_gad",
        data,
        tmp_path / "run",
        f"checkpoint.restore_file={tiny_encoder}",
        "task.valid_from_train=40",
        "task.head_hidden_layers=1",
        "task.head_hidden_size=8",
        "task.head_dropout=0.5",
        updates=6,
    )
    assert max(logged(log, "train")) == 6
    params = load_checkpoint(tmp_path / "run" / "checkpoint_best.pt")["model"]
    assert params["classification_heads.bio_sentence.hidden.0.weight"].size(0) == 8
