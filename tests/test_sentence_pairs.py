"""Sentence pairs in the model family's own format: an imported BERT (and ELECTRA discriminator)
keeps its token-type table and reads a pair as BERT's ``[CLS] a [SEP] b [SEP]`` with segment ids,
equal to HF's tokenizer and hidden states; a bio_roberta without token types computes exactly as
before and reads ``<s> a </s></s> b </s>``; the windows leave room for each format's specials; the
export writes the table back. Tiny random HF models over MiniLM's real WordPiece vocabulary,
offline."""

import argparse
import os
import shutil

import numpy as np
import pytest
import torch
from fairseq.models.roberta.hub_interface import RobertaHubInterface
from helpers.hf_models import (
    TOL,
    hf_to_fairseq,
    minilm_dir,
    pair_differences,
    save_tiny_bert,
    save_tiny_distilbert,
)
from helpers.small_models import make_dictionary, small_model, small_task

from fairseq_bio.checkpoints import load_checkpoint
from fairseq_bio.data.pair_format import PairFormat, segment_labels
from fairseq_bio.data.qa_dataset import collate_qa
from fairseq_bio.data.sentence_windows import (
    SentencePredictionDataset,
    collate_rows,
    plan_rows,
)
from fairseq_bio.data.tagging_dataset import EncodedWords
from fairseq_bio.hf import export_hf, import_hf
from fairseq_bio.hf.verify import CHECK_PAIRS, CHECK_SENTENCES
from fairseq_bio.models.bio_roberta import BioRobertaModel
from fairseq_bio.tasks.fine_tuning import adopt_encoder_architecture

os.environ["HF_HUB_OFFLINE"] = "1"
transformers = pytest.importorskip("transformers")

SEGMENTS = "encoder.sentence_encoder.segment_embeddings.weight"
PAIRS = CHECK_PAIRS + ((CHECK_SENTENCES[4], CHECK_SENTENCES[0]),)


def imported_tiny(tmp_path_factory, name, save, *args, **config):
    """(HF dir, import dir, import_info) of a tiny random HF model saved by ``save`` over MiniLM's
    vocabulary."""
    root = tmp_path_factory.mktemp(f"pairs-{name}")
    hf = save(root / "hf", minilm_dir(), *args, **config)
    info = import_hf(hf, root / "imported", log=lambda line: None)
    return hf, root / "imported", info


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """A tiny random BertForMaskedLM (``imported_tiny``)."""
    return imported_tiny(tmp_path_factory, "bert", save_tiny_bert)


@pytest.fixture(scope="module")
def electra(tmp_path_factory):
    """(HF dir, import dir) of a tiny random ElectraForPreTraining discriminator (embeddings as wide
    as its layers)."""
    hf, out, _ = imported_tiny(
        tmp_path_factory, "electra", save_tiny_bert, "ElectraForPreTraining", embedding_size=32
    )
    return hf, out


@pytest.fixture(scope="module")
def distilbert(tmp_path_factory):
    """A tiny random DistilBertForMaskedLM (``imported_tiny``)."""
    return imported_tiny(tmp_path_factory, "distilbert", save_tiny_distilbert)


def hub_of(directory):
    return BioRobertaModel.from_pretrained(str(directory), "model.pt").eval()


# ------------------------------------------------------------------------------------ imported BERT, ELECTRA


def test_bert_import_keeps_the_token_type_table(bert):
    hf, out, info = bert
    assert info["model"]["token_types"] == 2 and "++model.token_types=2" in info["hydra_overrides"]
    assert info["check"]["pairs"] == 2  # the import checked itself on pairs too
    weights = load_checkpoint(out / "model.pt")["model"]
    hf_types = transformers.BertForMaskedLM.from_pretrained(str(hf)).bert.embeddings
    hf_types = hf_types.token_type_embeddings.weight.detach()
    # type 0 folded into the positions (as before), the table holds each type's difference from it
    assert torch.equal(weights[SEGMENTS], hf_types - hf_types[0])
    assert not weights[SEGMENTS][0].any()


def test_bert_pair_through_the_hub_equals_hf(bert):
    hf, out, _ = bert
    hub = hub_of(out)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(hf))
    a, b = PAIRS[0]
    tokens = hub.encode(a, b)
    dictionary = hub.task.source_dictionary
    # [CLS] a [SEP] b [SEP]: one separator, as many tokens as HF's tokenizer gives
    assert len(tokens) == len(tokenizer(a, b)["input_ids"])
    assert (tokens == dictionary.eos()).sum() == 2 and tokens[0] == dictionary.bos()
    assert hub.decode(tokens) == [hub.decode(hub.encode(t)) for t in (a, b)]
    worst = pair_differences(hf, hub, PAIRS)
    print(f"BERT pairs: every layer's states max |diff| {worst:.2e}")
    assert worst <= TOL


def test_single_sentences_of_the_import_compute_exactly_as_without_the_table(bert):
    """Segment 0 lives in the positions, as the import put it before: a text alone (segment ids
    all 0, or none given) gives bit for bit what the model without the table gives."""
    _, out, _ = bert
    hub = hub_of(out)
    without = hub_of(out)
    without.model.encoder.sentence_encoder.segment_embeddings = None
    for sentence in CHECK_SENTENCES:
        tokens = hub.encode(sentence)[None]
        with torch.no_grad():
            with_ids = hub.extract_features(tokens)  # segment ids all 0
            no_ids = hub.model(tokens, features_only=True)[0]
            plain = without.model(tokens, features_only=True)[0]
        assert torch.equal(with_ids, plain) and torch.equal(no_ids, plain)


def test_electra_discriminator_pair_equals_hf(electra):
    hf, out = electra
    hub = hub_of(out)
    assert hub.model.args.token_types == 2
    worst = pair_differences(hf, hub, PAIRS, "ElectraModel")
    print(f"ELECTRA discriminator pairs: every layer's states max |diff| {worst:.2e}")
    assert worst <= TOL


def test_distilbert_pair_is_berts_rows_without_token_types(distilbert):
    """DistilBERT has no token types, but its tokenizer reads a pair as BERT's rows: the import
    says so (``model.bert_pairs``), checks itself on pairs, and the hub's pair equals HF's."""
    hf, out, info = distilbert
    assert info["model"]["token_types"] == 0 and info["model"]["bert_pairs"]
    assert info["check"]["pairs"] == 2
    hub = hub_of(out)
    assert hub.pair_format.one_separator and not hub.pair_format.segments
    a, b = PAIRS[0]
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(hf))
    assert len(hub.encode(a, b)) == len(tokenizer(a, b)["input_ids"])
    worst = pair_differences(hf, hub, PAIRS, "DistilBertModel")
    print(f"DistilBERT pairs: every layer's states max |diff| {worst:.2e}")
    assert worst <= TOL


def test_fine_tuning_adopts_the_token_types_of_its_encoder(bert):
    _, out, _ = bert
    cfg = argparse.Namespace(token_types=0)
    adopt_encoder_architecture(cfg, str(out / "model.pt"))
    assert cfg.token_types == 2


# ------------------------------------------------------------------------------------ without token types


def test_a_checkpoint_without_token_types_is_served_as_before(bert, tmp_path):
    """A checkpoint from before the option (no token_types in its settings, no table): loads, reads
    pairs as <s> a </s></s> b </s>, and the hub computes exactly what fairseq's own interface does.
    """
    _, out, _ = bert
    old = tmp_path / "old"
    shutil.copytree(out, old)
    state = load_checkpoint(old / "model.pt")
    del state["model"][SEGMENTS]
    del state["cfg"]["model"]["token_types"], state["cfg"]["model"]["bert_pairs"]
    torch.save(state, old / "model.pt")
    hub = hub_of(old)
    assert hub.model.args.token_types == 0
    assert hub.model.encoder.sentence_encoder.segment_embeddings is None
    stock = RobertaHubInterface(hub.cfg, hub.task, hub.model).eval()
    eos = hub.task.source_dictionary.eos()
    for a, b in PAIRS:
        tokens = hub.encode(a, b)
        assert torch.equal(tokens, stock.encode(a, b))
        first = int((tokens == eos).nonzero()[0])
        assert tokens[first + 1] == eos  # </s></s>
        assert torch.equal(hub.extract_features(tokens), stock.extract_features(tokens))
        assert hub.decode(tokens) == stock.decode(tokens)
    # its single sentences: the same as the import with the table (type 0 is in the positions)
    new = hub_of(out)
    for sentence in CHECK_SENTENCES:
        tokens = hub.encode(sentence)
        assert torch.equal(new.extract_features(tokens), hub.extract_features(tokens))


def test_encoder_table_row_zero_stays_zero_and_is_needed_for_segment_ids():
    task = small_task()
    plain, typed = small_model(task), small_model(task, token_types=2)
    assert not any("segment" in key for key in plain.state_dict())
    table = typed.encoder.sentence_encoder.segment_embeddings
    assert table.weight.shape == (2, 32) and not table.weight[0].any() and table.weight[1].any()
    tokens = torch.randint(4, 40, (2, 7))
    tokens[:, 0], tokens[:, -1] = 0, 2
    tokens[:, 3] = 2  # <s> x x </s> y y </s>
    segments = segment_labels(tokens, 2, 1)
    assert segments[0].tolist() == [0, 0, 0, 0, 1, 1, 1]
    typed.train()
    typed(tokens, features_only=True, segment_labels=segments)[0].sum().backward()
    assert not table.weight.grad[0].any() and table.weight.grad[1].any()
    with pytest.raises(ValueError, match="without token types"):
        plain(tokens, segment_labels=segments)


# ---------------------------------------------------------------------------------------------- windows


def test_pair_windows_leave_room_for_each_formats_specials():
    counts = [1] * 600
    assert plan_rows(counts, counts, 512)[2] == 508 - 254  # <s> a </s></s> b </s>
    keep, _, room = plan_rows(counts, counts, 512, pair_format=PairFormat(segments=True))
    assert keep + room == 509  # <s> a </s> b </s>
    assert plan_rows([1] * 5, [1] * 504, 512, pair_format=PairFormat(True))[1] == [(0, 504)]
    assert len(plan_rows([1] * 5, [1] * 504, 512)[1]) == 2


def test_sentence_rows_and_segment_ids_per_format():
    dictionary, _ = make_dictionary([f"w{i}" for i in range(40)])
    w = [dictionary.index(f"w{i}") for i in range(40)]
    first = EncodedWords.encode(_Words(w), [[f"{i}" for i in range(3)]])
    second = EncodedWords.encode(_Words(w), [[f"{i}" for i in range(10, 30)]])
    bos, eos = dictionary.bos(), dictionary.eos()
    # 3 + 20 pieces in rows of 16: 9 of the second text per row beside </s></s>, 10 beside </s>
    for fmt, specials, windows in ((PairFormat(), 4, 3), (PairFormat(True), 3, 2)):
        dataset = SentencePredictionDataset([first, second], dictionary, 16, pair_format=fmt)
        batch = dataset.collater([dataset[0]])
        rows = batch["net_input"]["src_tokens"]
        assert rows.size(1) == 16 and len(rows) == windows == dataset.windows(0)
        assert dataset.sizes[0] == 20 + windows * (3 + specials)
        row = rows[0].tolist()
        assert row[:5] == [bos, w[0], w[1], w[2], eos]
        assert row[5] == (eos if specials == 4 else w[10])
        if fmt.segments:
            ids = batch["net_input"]["segment_labels"]
            assert ids[0].tolist() == [0] * 5 + [1] * 11
            assert torch.equal(ids, segment_labels(rows, eos, dictionary.pad()))
        else:
            assert "segment_labels" not in batch["net_input"]


def test_collated_segment_ids_reach_the_encoder_through_a_head():
    """A batch's ``net_input`` (segment ids included) goes through the model and its heads as the
    criteria pass it: segment 1 changes the pair's outputs, and only through the table."""
    task = small_task()
    model = small_model(task, token_types=2)
    model.register_classification_head("head", num_classes=3)
    sample = {"id": 0, "rows": [([5, 6], [7, 8, 9])], "target": 1}
    batch = collate_rows([sample], task.source_dictionary, PairFormat(True))
    net_input = batch["net_input"]
    assert net_input["segment_labels"].tolist() == [[0, 0, 0, 0, 1, 1, 1, 1]]
    with torch.no_grad():
        logits, _ = model(**net_input, classification_head_name="head")
        no_ids, _ = model(net_input["src_tokens"], classification_head_name="head")
        model.encoder.sentence_encoder.segment_embeddings.weight.zero_()
        zeroed, _ = model(**net_input, classification_head_name="head")
    assert not torch.equal(logits, no_ids) and torch.equal(zeroed, no_ids)


def test_qa_rows_per_format():
    dictionary, _ = make_dictionary([f"w{i}" for i in range(40)])
    question, pieces = np.asarray([10, 11]), np.arange(12, 20)
    sample = {
        "id": 0,
        "question": question,
        "pieces": pieces,
        "windows": [(0, 8)],
        "owner": np.zeros(8, dtype=np.int64),
        "target": (2, 3),
        "context": ("", None, None),
        "gold": None,
    }
    bos, eos = dictionary.bos(), dictionary.eos()
    roberta = collate_qa([sample], dictionary)
    bert = collate_qa([sample], dictionary, PairFormat(True))
    assert roberta["net_input"]["src_tokens"][0].tolist() == [bos, 10, 11, eos, eos, *pieces, eos]
    assert bert["net_input"]["src_tokens"][0].tolist() == [bos, 10, 11, eos, *pieces, eos]
    assert bert["net_input"]["segment_labels"][0].tolist() == [0] * 4 + [1] * 9
    assert "segment_labels" not in roberta["net_input"]
    assert roberta["context_column"].tolist() == [5] and bert["context_column"].tolist() == [4]
    assert bert["start_positions"].tolist() == [6] and roberta["start_positions"].tolist() == [7]
    assert bert["span_mask"][0].nonzero().flatten().tolist() == list(range(4, 12))


class _Words:
    """A word encoder: word ``"i"`` is piece ``ids[i]``."""

    def __init__(self, ids):
        self.ids = ids

    def encode_sentence(self, words):
        return [[self.ids[int(word)]] for word in words]


# ----------------------------------------------------------------------------------------------- export


def export_against_original(hf, exported, hub, check_types) -> float:
    """Largest |difference| of the last states, the original HF model on its tokenizer's pairs
    against the export on its own tokenizer's: the ids the same in fairseq's order (``hub``'s),
    the token types as ``check_types(encoded, ours)`` asserts."""
    original = transformers.AutoModel.from_pretrained(str(hf)).eval()
    again = transformers.AutoModel.from_pretrained(str(exported)).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(hf))
    exported_tokenizer = transformers.AutoTokenizer.from_pretrained(str(exported))
    hf_to_fs = hf_to_fairseq(hub, tokenizer)
    worst = 0.0
    for a, b in PAIRS:
        encoded = tokenizer(a, b, return_tensors="pt")
        ours = exported_tokenizer(a, b, return_tensors="pt")
        assert torch.equal(hf_to_fs[encoded["input_ids"]], ours["input_ids"])
        check_types(encoded, ours)
        with torch.no_grad():
            before = original(**encoded).last_hidden_state
            after = again(**ours).last_hidden_state
        worst = max(worst, (before - after).abs().max().item())
    return worst


def test_export_writes_the_table_and_hf_reads_pairs_as_fairseq(bert, tmp_path):
    hf, out, _ = bert
    exported = tmp_path / "hf"
    result = export_hf(out / "model.pt", exported, log=lambda line: None)
    assert result["pairs"] == 2 and result["hidden_max_abs_diff"] <= TOL
    config = transformers.AutoConfig.from_pretrained(str(exported))
    assert config.type_vocab_size == 2
    hub = hub_of(out)
    worst = pair_differences(exported, hub, PAIRS)

    # and the export against the original HF BERT, pair for pair
    def same_types(encoded, ours):
        assert torch.equal(encoded["token_type_ids"], ours["token_type_ids"])

    worst = max(worst, export_against_original(hf, exported, hub, same_types))
    print(f"exported pairs: max |diff| {worst:.2e}")
    assert worst <= TOL
    # imported back: the same table
    back = tmp_path / "back"
    info = import_hf(exported, back, log=lambda line: None)
    assert info["model"]["token_types"] == 2
    assert torch.equal(
        load_checkpoint(back / "model.pt")["model"][SEGMENTS],
        load_checkpoint(out / "model.pt")["model"][SEGMENTS],
    )


def test_a_distilbert_import_exports_and_imports_back_with_berts_rows(distilbert, tmp_path):
    """Exported (a RoBERTa-class HF model, one token type), its tokenizer reads a pair as BERT's
    rows with token type 0, as DistilBERT's does; the states equal the original DistilBERT's; the
    export imports back as a model reading BERT's rows; fine-tuning adopts the format."""
    hf, out, _ = distilbert
    exported = tmp_path / "hf"
    result = export_hf(out / "model.pt", exported, log=lambda line: None)
    assert result["pairs"] == 2 and result["hidden_max_abs_diff"] <= TOL

    def type_zero(encoded, ours):
        assert not ours.get("token_type_ids", torch.zeros(1)).any()

    worst = export_against_original(hf, exported, hub_of(out), type_zero)
    print(f"exported DistilBERT pairs: max |diff| {worst:.2e}")
    assert worst <= TOL
    info = import_hf(exported, tmp_path / "back", log=lambda line: None)
    assert info["model"]["bert_pairs"] and info["model"]["token_types"] == 0
    assert info["check"]["pairs"] == 2
    cfg = argparse.Namespace(token_types=0, bert_pairs=False)
    adopt_encoder_architecture(cfg, str(out / "model.pt"))
    assert cfg.bert_pairs and cfg.token_types == 0
