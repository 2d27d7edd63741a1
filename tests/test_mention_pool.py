"""Entity mention pooling for relation extraction (PubMedBERT Table 12's MENTION: each entity
mention's top states max-pooled, the two concatenated into the classifier;
task.entity_representation=mention_pool on the text as given, marker_mention with [E1] ... [/E2]
around the mentions) on real GAD and DDI rows: each mention's words and pieces are found exactly
(byte-level BPE), the head equals a max-pool computed by hand on a 2-layer 32-wide model, and a
short fairseq-hydra-train run on a GAD slice fits its train rows, reloads for fairseq-bio-predict
with the dev metrics it logged, keeps the encoder's dictionary as it is, and is refused by the HF
export in one line."""

import json

import pytest
import torch
from conftest import SHARED_DATA, fine_tune_sentence, logged, run_cli
from helpers.small_models import DictionaryTask, make_dictionary, model_args

from fairseq_bio.data.sentence_files import (
    ENTITY_MARKERS,
    attach_entities,
    entity_words,
    read_jsonl,
    read_tsv,
)
from fairseq_bio.data.sentence_windows import SentencePredictionDataset, WindowError
from fairseq_bio.data.tagging_dataset import EncodedWords, WordEncoder
from fairseq_bio.modules.entity_head import MentionPoolClassificationHead, mention_max_pool

GAD, DDI = SHARED_DATA / "re" / "GAD", SHARED_DATA / "re" / "DDI"
GAD_PLACEHOLDERS, DDI_PLACEHOLDERS = ["@GENE$", "@DISEASE$"], ["@DRUG$", "@DRUG-DRUG$"]
UPDATES = 60


def gad_rows(n):
    rows = read_tsv(str(GAD / "train.tsv"), ["sentence"], "label")[:n]
    attach_entities(rows, "gad", GAD_PLACEHOLDERS, markers=False)
    return rows


def test_each_mention_is_its_words_with_or_without_markers():
    """On real rows the mention spans cover exactly the placeholder (a word an offset cuts becomes
    two), with markers they are the words between [Ek] and [/Ek], and the words without markers are
    the marked words minus the markers; DDI's @DRUG-DRUG$ (one mention that is both drugs) is the
    same span twice."""
    ddi = read_jsonl(str(DDI / "dev.json"), ["sentence"], "label", "id")
    combined = [ex for ex in ddi if "@DRUG-DRUG$" in ex.texts[0]][:3]
    ddi = combined + [ex for ex in ddi[:200] if ex not in combined]
    attach_entities(ddi, "ddi", DDI_PLACEHOLDERS, markers=False)
    for ex in gad_rows(300) + ddi:
        text = ex.texts[0]
        words, spans = entity_words(text, ex.entities, markers=False)
        marked, marked_spans = entity_words(text, ex.entities)
        assert [w for w in marked if w not in ENTITY_MARKERS] == words
        for k, (entity, (start, end), (m_start, m_end)) in enumerate(
            zip(ex.entities, spans, marked_spans)
        ):
            assert "".join(words[start:end]) == text[entity.start : entity.end].replace(" ", "")
            assert marked[m_start:m_end] == words[start:end]
            if ex.entities[0] != ex.entities[1]:
                assert (
                    marked[m_start - 1] == ENTITY_MARKERS[2 * k]
                    and marked[m_end] == ENTITY_MARKERS[2 * k + 1]
                )
    for ex in ddi[:3]:
        first, second = entity_words(ex.texts[0], ex.entities, markers=False)[1]
        assert first == second and ex.entities[0] == ex.entities[1]


def test_rows_carry_the_token_spans_of_the_mention_pieces(learned_vocab):
    """With the vocabulary's own byte-level BPE, each row's mention spans select exactly the pieces
    of the mention's words, also when a long text becomes the one window centred on the mentions;
    mentions that alone need more than a window are refused, never cut."""
    from fairseq_bio.tasks.fine_tuning import load_vocab

    dictionary, spec = load_vocab(str(learned_vocab("bytebpe")))
    encoder = WordEncoder(dictionary, spec)
    rows = gad_rows(100)
    filler = " ".join(["the"] * 150)
    long = read_tsv(str(GAD / "train.tsv"), ["sentence"], "label")[100:110]
    for ex in long:  # 150 words before and after: longer than the 128 positions
        ex.texts = (f"{filler} {ex.texts[0]} {filler}",)
    attach_entities(long, "gad", GAD_PLACEHOLDERS, markers=False)
    split = [entity_words(ex.texts[0], ex.entities, markers=False) for ex in rows + long]
    encoded = EncodedWords.encode(encoder, [words for words, _ in split])
    dataset = SentencePredictionDataset(
        [encoded], dictionary, 128, mentions=[spans for _, spans in split]
    )
    sample = dataset.collater([dataset[i] for i in range(len(dataset))])
    tokens, mentions = sample["net_input"]["src_tokens"], sample["mentions"]
    assert tokens.shape[0] == mentions.shape[0] == 110 and mentions.shape[1:] == (2, 2)
    assert tokens.shape[1] <= 128
    for i, (words, spans) in enumerate(split):
        pieces = encoded.sentence(i)
        for (start, end), (t_start, t_end) in zip(spans, mentions[i].tolist()):
            assert tokens[i, t_start:t_end].tolist() == [
                int(p) for w in pieces[start:end] for p in w
            ]
    assert all(dataset.windows(i) == 1 for i in range(len(dataset)))

    far = [["@GENE$"] + ["the"] * 200 + ["@DISEASE$"]]
    with pytest.raises(
        WindowError, match="the entity mentions span .* pieces, more than one window of 128 tokens"
    ):
        SentencePredictionDataset(
            [EncodedWords.encode(encoder, far)], dictionary, 128, mentions=[[(0, 1), (201, 202)]]
        )


def test_mention_head_max_pools_each_mention_as_computed_by_hand():
    """On a 2-layer, 32-wide bio_roberta: B x 2 x 2 spans -> B x K logits equal to
    dense/tanh/out_proj of the concatenated per-mention maxima taken by hand; an empty span is
    refused."""
    from fairseq_bio.models.bio_roberta import BioRobertaModel

    dictionary, _ = make_dictionary([f"w{i}" for i in range(40)])
    torch.manual_seed(0)
    small = dict(
        encoder_layers=2, encoder_embed_dim=32, encoder_ffn_embed_dim=64, encoder_attention_heads=4
    )
    model = BioRobertaModel.build_model(
        model_args("bio_roberta_tiny", **small), DictionaryTask(dictionary)
    ).eval()
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(dictionary.nspecial, len(dictionary) - 1, (3, 12), generator=g)
    spans = torch.tensor([[[1, 3], [5, 6]], [[2, 2 + 4], [7, 11]], [[4, 5], [4, 5]]])
    features, _ = model(tokens, features_only=True)
    head = MentionPoolClassificationHead(32, 3).eval()
    logits = head(features, spans)
    assert logits.shape == (3, 3) and mention_max_pool(features, spans).shape == (3, 2, 32)
    by_hand = []
    for b in range(3):
        pooled = [features[b, s:e].max(0).values for s, e in spans[b].tolist()]
        by_hand.append(head.out_proj(torch.tanh(head.dense(torch.cat(pooled)))))
    assert torch.allclose(logits, torch.stack(by_hand), atol=1e-6)
    logits.sum().backward()  # the gradient reaches the encoder through the pooled positions
    assert model.encoder.sentence_encoder.layers[0].fc1.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="mention spans must be non-empty"):
        mention_max_pool(features, torch.tensor([[[3, 3], [4, 5]]] * 3))


# ------------------------------------------------------------------------------------------ end to end on real GAD


@pytest.fixture(scope="module")
def mention_run(tiny_encoder, tmp_path_factory):
    """(save_dir, json log, data dir) of sentence_task=re_gad
    task.entity_representation=mention_pool on a real GAD slice: 160 train rows (about 10 epochs in
    60 updates of 16 at lr 1e-3, enough to fit them) and 100 later train rows as dev."""
    data = tmp_path_factory.mktemp("gad-mentions")
    lines = (GAD / "train.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
    (data / "train.tsv").write_text("".join(lines[:160]), encoding="utf-8")
    (data / "dev.tsv").write_text("".join(lines[4000:4100]), encoding="utf-8")
    save_dir = tmp_path_factory.mktemp("mentions")
    log = fine_tune_sentence(
        "re_gad",
        data,
        save_dir,
        f"checkpoint.restore_file={tiny_encoder}",
        "task.entity_representation=mention_pool",
        "task.valid_file=dev.tsv",
        "task.valid_from_train=0",
        "optimizer.groups.default.lr_float=0.001",
        "common.log_interval=5",
        updates=UPDATES,
    )
    return save_dir, log, data


@pytest.fixture(scope="module")
def loaded(mention_run):
    from fairseq_bio.inference.loading import load_fine_tuned

    return load_fine_tuned(str(mention_run[0] / "checkpoint_last.pt"), cpu=True)


def test_mention_run_keeps_the_dictionary_and_pools_the_mentions(mention_run, loaded, tiny_encoder):
    """No token is added (the embeddings keep the encoder's rows), the head takes 2 x 128, and the
    criterion's pooled logits equal the head applied by hand to the max-pooled placeholder pieces of
    real dev rows.
    """
    from fairseq_bio.checkpoints import load_checkpoint
    from fairseq_bio.criterions.bio_sentence_prediction import BioSentencePredictionCriterion

    save_dir, log, _ = mention_run
    tuned, encoder = load_checkpoint(save_dir / "checkpoint_last.pt"), load_checkpoint(tiny_encoder)
    key = "encoder.sentence_encoder.embed_tokens.weight"
    assert tuned["model"][key].shape == encoder["model"][key].shape
    assert tuned["task_state"] == {"labels": ["0", "1"], "kind": "classification"}
    assert tuned["cfg"]["task"]["entity_representation"] == "mention_pool"
    assert tuned["model"]["classification_heads.bio_sentence.dense.weight"].shape == (128, 2 * 128)
    assert {"f1", "accuracy", "macro_f1"} <= set(logged(log, "valid")[UPDATES])

    task, model = loaded
    assert len(task.source_dictionary) == len(task.dictionary)
    examples = task.read_split("valid")[:8]
    dataset = task.build_dataset(examples, shuffle=False)
    sample = dataset.collater([dataset[i] for i in range(8)])
    head = model.classification_heads["bio_sentence"]
    with torch.no_grad():
        pooled = BioSentencePredictionCriterion(None, task).pool(model, sample)
        features, _ = model(**sample["net_input"], features_only=True)
    for i, ex in enumerate(examples):
        _, spans = task.entity_words(ex)
        tokens = sample["net_input"]["src_tokens"][i]
        states = []
        for (t_start, t_end), entity in zip(sample["mentions"][i].tolist(), ex.entities):
            placeholder = task.word_encoder.encode(
                ex.texts[0][entity.start : entity.end], entity.start == 0
            )
            assert tokens[t_start:t_end].tolist() == placeholder
            states.append(features[i, t_start:t_end].max(0).values)
        with torch.no_grad():
            by_hand = head.out_proj(torch.tanh(head.dense(torch.cat(states))))
        assert torch.allclose(pooled[i], by_hand, atol=1e-5)


def test_marker_mention_pools_the_pieces_between_the_markers(loaded):
    """marker_mention (Table 12's entity markers + MENTION), on the same real dev rows: four marker
    tokens added (as for marker_start), each mention span exactly the pieces between [Ek] and [/Ek]
    (the placeholder's pieces of the mention_pool rows), and the mention-pooling head."""
    import copy

    from fairseq_bio.tasks.bio_sentence_prediction import BioSentencePredictionTask

    task, model = loaded
    cfg = copy.deepcopy(task.cfg)
    cfg.entity_representation = "marker_mention"
    marked = BioSentencePredictionTask(
        cfg, task.dictionary, task.bpe_spec, task.vocab_dir, task.labels
    )
    marked.window = task.window
    assert [marked.source_dictionary[len(task.dictionary) + i] for i in range(4)] == list(
        ENTITY_MARKERS
    )
    samples = []
    for t in (task, marked):
        dataset = t.build_dataset(t.read_split("valid")[:20], shuffle=False)
        samples.append(dataset.collater([dataset[i] for i in range(20)]))
    (plain, marks) = samples
    ids = [marked.source_dictionary.index(m) for m in ENTITY_MARKERS]
    for i in range(20):
        for k in range(2):
            (start, end), (m_start, m_end) = (
                plain["mentions"][i, k].tolist(),
                marks["mentions"][i, k].tolist(),
            )
            row = marks["net_input"]["src_tokens"][i]
            assert row[m_start - 1] == ids[2 * k] and row[m_end] == ids[2 * k + 1]
            assert (
                row[m_start:m_end].tolist()
                == plain["net_input"]["src_tokens"][i, start:end].tolist()
            )
    other = copy.deepcopy(model)
    marked.register_head(other)
    assert type(other.classification_heads["bio_sentence"]) is MentionPoolClassificationHead


def test_mention_model_fits_its_train_rows_and_predict_reproduces_the_dev_metrics(
    mention_run, loaded, tmp_path
):
    """The run learns: train loss falls and the model, scored on its 160 train rows, is far above
    the majority class (the head's gradient reaches the encoder through the pooled mentions).
    fairseq-bio-predict on the dev file prints the dev metrics the run logged for the same
    checkpoint."""
    from fairseq_bio.inference.sentence_level import predict_sentence_file

    save_dir, log, data = mention_run
    train = logged(log, "train_inner")
    assert float(train[max(train)]["loss"]) < 0.8 * float(train[min(train)]["loss"])
    task, model = loaded
    scores = predict_sentence_file(
        task, model, str(data / "train.tsv"), str(tmp_path / "train.jsonl"), progress=False
    )
    rows = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    majority = max(sum(r["gold"] == label for r in rows) for label in ("0", "1")) / len(rows)
    assert scores["accuracy"] >= 100 * majority + 15

    out = tmp_path / "dev.jsonl"
    printed = run_cli(
        [
            "fairseq-bio-predict",
            "--checkpoint",
            save_dir / "checkpoint_last.pt",
            "--input",
            data / "dev.tsv",
            "--out",
            out,
            "--cpu",
            "--no-progress",
        ],
        cwd=tmp_path,
    ).stdout
    last = printed.strip().splitlines()[-1].split()
    metrics = dict(zip(last[::2], map(float, last[1::2])))
    valid = logged(log, "valid")[UPDATES]
    for key in ("accuracy", "macro_f1", "precision", "recall", "f1"):
        assert metrics[key] == pytest.approx(float(valid[key]), abs=0.01), key


def test_hf_export_refuses_mention_models_in_one_line(mention_run, tmp_path):
    from fairseq_bio.hf import HFConvertError, export_hf

    with pytest.raises(
        HFConvertError,
        match=r"task.entity_representation=mention_pool: not exported: no HF "
        "sequence-classification model max-pools entity mention states",
    ) as error:
        export_hf(mention_run[0] / "checkpoint_last.pt", tmp_path / "hf")
    assert "\n" not in str(error.value) and not (tmp_path / "hf").exists()
