"""Tagging (``bio_tagging``) with a fine-tuned checkpoint: BIO tags per word of sentences, a CoNLL
file tagged (and scored when it has gold tags), raw text into JSON lines of character-offset entity
spans."""

import codecs
import json
import sys
from typing import Dict, List, Optional, Sequence
from unicodedata import normalize

import torch

from ..files import InputError, atomic_write
from .loading import TAGGING, batches, load_fine_tuned
from .predictions import PREDICT


def load_tagger(
    checkpoint: str, vocab: Optional[str] = None, cpu: bool = False, fp16: bool = False
):
    """(task, model) of a fine-tuned ``bio_tagging`` checkpoint, in eval mode."""
    return load_fine_tuned(checkpoint, vocab, cpu, fp16, tasks=(TAGGING,))


def predict_tags(
    task, model, sentences, max_tokens: int = 4096, max_sentences: int = 64, progress=True
):
    """BIO tags predicted for every word of every sentence (input order)."""
    from fairseq import utils
    from tqdm import tqdm

    from ..data.tagging_dataset import word_predictions

    stripped = [type(s)(words=s.words, tags=None, lines=s.lines) for s in sentences]
    dataset = task.build_dataset(stripped, task.encode(stripped), shuffle=False)
    head = model.classification_heads[task.cfg.head_name]
    device = next(model.parameters()).device
    results: List[Optional[List[str]]] = [None] * len(sentences)
    with torch.no_grad(), tqdm(
        total=len(sentences), unit="sent", disable=not progress, file=sys.stderr
    ) as bar:
        for indices in batches(dataset, max_tokens, max_sentences):
            sample = dataset.collater([dataset[i] for i in indices])
            net_input = (
                utils.move_to_cuda(sample["net_input"])
                if device.type == "cuda"
                else sample["net_input"]
            )
            scores, _ = model(
                **net_input, features_only=True, classification_head_name=task.cfg.head_name
            )
            predicted = head.predict(scores.float(), sample["positions"].to(device)).cpu()
            for i, labels in zip(indices, word_predictions(sample, predicted)):
                results[i] = task.predictions_to_tags(labels)
            bar.update(len(indices))
    return results


def predict_conll(
    task, model, input_path: str, output_path: str, **kwargs
) -> Optional[Dict[str, float]]:
    """Tag a CoNLL file; returns its ``prediction_scores`` (fractions: entity precision, recall, F1,
    word macro F1) when it carries gold tags."""
    from ..data.conll import write_conll
    from ..metrics.benchmark_scores import TAGS, prediction_scores

    sentences = task.read_split(input_path, require_tags=False, predicting=True)
    predictions = predict_tags(task, model, sentences, **kwargs)
    gold = [s.tags for s in sentences] if sentences[0].tags is not None else None
    with atomic_write(output_path, by=PREDICT) as f:
        if gold is None:
            write_conll(f, [(s.words, p) for s, p in zip(sentences, predictions)])
        else:
            columns = [[f"{g}\t{p}" for g, p in zip(gs, ps)] for gs, ps in zip(gold, predictions)]
            write_conll(f, [(s.words, c) for s, c in zip(sentences, columns)])
    return prediction_scores(TAGS, gold, predictions) if gold is not None else None


def split_text(lines: Sequence[str], documents: bool):
    """Per input line, its sentences as lists of ``(word, start, end)`` (offsets into the line)."""
    from ..data.conll import words_with_offsets

    splitter = None
    if documents:
        from ..data.sentence_splitter import SentenceSplitter

        splitter = SentenceSplitter.train(line for line in lines if line.strip())
    out = []
    for line in lines:
        words = words_with_offsets(line)
        if splitter is None or not words:
            out.append([words] if words else [])
            continue
        sentences, taken = [], 0
        for sentence in splitter.split(line):
            n = len(words_with_offsets(sentence))
            sentences.append(words[taken : taken + n])
            taken += n
        if taken != len(
            words
        ):  # the splitter only collapses whitespace, so this cannot happen; never drop words
            sentences.append(words[taken:])
        out.append([s for s in sentences if s])
    return out


def predict_text(
    task, model, input_path: str, output_path: str, documents: bool = True, **kwargs
) -> int:
    """Tag raw text, one sentence/document per line, into JSON lines of entity spans; returns the
    span count."""
    from ..data.conll import Sentence
    from ..metrics.tagging import get_entities

    lines = []
    with open(input_path, "rb") as f:
        for number, raw in enumerate(f.read().removeprefix(codecs.BOM_UTF8).split(b"\n"), start=1):
            try:
                lines.append(raw.decode("utf-8").rstrip("\r"))
            except UnicodeDecodeError as e:
                raise InputError(
                    f"{input_path}:{number}: not valid UTF-8 (byte 0x{raw[e.start]:02x})"
                ) from None
    if lines and lines[-1] == "":
        lines.pop()
    per_line = split_text(lines, documents)
    # The model reads each word in its composed form (NFC, as PubMed and the NER corpora are
    # written), so decomposed input is tagged as its composed form would be; the spans' offsets stay
    # the input's own.
    flat = [
        Sentence(words=[normalize("NFC", w) for w, _, _ in s])
        for sentences in per_line
        for s in sentences
    ]
    predictions = predict_tags(task, model, flat, **kwargs) if flat else []
    count, k = 0, 0
    with atomic_write(output_path, by=PREDICT) as f:
        for number, (line, sentences) in enumerate(zip(lines, per_line), start=1):
            spans = []
            for words in sentences:
                for kind, a, b in get_entities(predictions[k]):
                    start, end = words[a][1], words[b - 1][2]
                    spans.append(
                        {"start": start, "end": end, "type": kind, "text": line[start:end]}
                    )
                k += 1
            count += len(spans)
            f.write(json.dumps({"line": number, "spans": spans}, ensure_ascii=False) + "\n")
    return count
