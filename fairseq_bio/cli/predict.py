"""fairseq-bio-predict: a fine-tuned tagging or sentence-level checkpoint applied to new files.

Tagging (``bio_tagging``): CoNLL in (``token`` or ``token<TAB>tag`` per line), CoNLL out: ``token<TAB>prediction``, or conlleval's
``token<TAB>gold<TAB>prediction`` when the input has gold tags, whose entity P/R/F1 is then printed (the metric
code the criterion uses). Raw text in (one sentence or document per line; documents are split into sentences),
JSON lines out: one object per input line with its entity spans (``start``/``end`` character offsets into the
line, ``type``, ``text``). Long sentences are windowed as in training: every word gets exactly one prediction.

Sentence level (``bio_sentence_prediction``: relation extraction, HoC, BIOSSES, PubMedQA, NLI): a file in the format
the task was trained on (TSV, JSON lines; PubMedQA: ``ori_pqal.json`` with ``--split``), JSON lines out, one object
per input row in input order: ``id``, ``line``, ``pred`` (the label, the 0/1 row, or the score), ``probabilities``
(softmax over the labels, or a sigmoid per label) and ``gold`` when the input carries labels, whose metrics are then
printed, computed by the criterion's own code. Long texts are windowed and their windows mean-pooled as in training.

Extractive QA (``bio_extractive_qa``): a SQuAD v1.1 JSON file in, JSON lines out, one object per question in file
order: ``id``, ``question``, ``answers`` (the top 5, best first: ``text``, exactly ``context[start:end]``, ``start`` /
``end`` character offsets into the context, ``score``, ``probability``) and ``gold`` when the file has answers, whose
SQuAD EM/F1 and BioASQ factoid strict/lenient accuracy and MRR are then printed, computed by the criterion's code.
Long contexts are windowed with the task's doc stride as in training.
"""

import argparse
import contextlib
import json
import logging
import os
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from ..errors import BioError, run_cli
from ..outputs import check_output

logger = logging.getLogger("fairseq_bio.cli.predict")


class PredictError(BioError):
    """Bad input or a checkpoint that cannot tag; printed as one line."""


TAGGING, SENTENCE, QA = "bio_tagging", "bio_sentence_prediction", "bio_extractive_qa"


def load_tagger(checkpoint: str, vocab: Optional[str] = None, cpu: bool = False, fp16: bool = False):
    """(task, model) of a fine-tuned ``bio_tagging`` checkpoint, in eval mode."""
    return load_fine_tuned(checkpoint, vocab, cpu, fp16, tasks=(TAGGING,))


def load_fine_tuned(
    checkpoint: str, vocab: Optional[str] = None, cpu: bool = False, fp16: bool = False, tasks=(TAGGING, SENTENCE, QA)
):
    """(task, model) of a checkpoint fine-tuned by one of ``tasks``, in eval mode."""
    from fairseq import checkpoint_utils

    import fairseq_bio  # noqa: F401  (registers the plugin)

    from ..tasks.fine_tuning import has_vocab

    if not os.path.exists(checkpoint):
        raise PredictError(f"{checkpoint}: not found")
    beside = os.path.dirname(os.path.abspath(checkpoint))
    overrides = {"vocab": vocab or (beside if has_vocab(beside) else None), "cache_dir": None}
    overrides = {k: v for k, v in overrides.items() if v is not None or k == "cache_dir"}
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([checkpoint], arg_overrides=overrides)
    if cfg.task._name not in tasks:
        raise PredictError(f"{checkpoint}: a {cfg.task._name} checkpoint, not a {' or '.join(tasks)} one")
    model = models[0].eval()
    if fp16:
        model.half()
    if torch.cuda.is_available() and not cpu:
        model.cuda()
    return task, model


def batches(dataset, max_tokens: int, max_sentences: int):
    """Index lists in length order, each within ``max_tokens`` (a longer sentence alone) and ``max_sentences``."""
    order = dataset.ordered_indices()
    batch, width = [], 0
    for i in order:
        size = int(dataset.sizes[i])
        if batch and (max(width, size) * (len(batch) + 1) > max_tokens or len(batch) >= max_sentences):
            yield batch
            batch, width = [], 0
        batch.append(int(i))
        width = max(width, size)
    if batch:
        yield batch


def predict_tags(task, model, sentences, max_tokens: int = 4096, max_sentences: int = 64, progress=True):
    """BIO tags predicted for every word of every sentence (input order)."""
    from fairseq import utils
    from tqdm import tqdm

    from ..data.tagging_dataset import word_predictions

    stripped = [type(s)(words=s.words, tags=None, lines=s.lines) for s in sentences]
    dataset = task.build_dataset(stripped, task.encode(stripped), shuffle=False)
    head = model.classification_heads[task.cfg.head_name]
    device = next(model.parameters()).device
    results: List[Optional[List[str]]] = [None] * len(sentences)
    with torch.no_grad(), tqdm(total=len(sentences), unit="sent", disable=not progress, file=sys.stderr) as bar:
        for indices in batches(dataset, max_tokens, max_sentences):
            sample = dataset.collater([dataset[i] for i in indices])
            net_input = utils.move_to_cuda(sample["net_input"]) if device.type == "cuda" else sample["net_input"]
            scores, _ = model(**net_input, features_only=True, classification_head_name=task.cfg.head_name)
            predicted = head.predict(scores.float(), sample["positions"].to(device)).cpu()
            for i, labels in zip(indices, word_predictions(sample, predicted)):
                results[i] = task.predictions_to_tags(labels)
            bar.update(len(indices))
    return results


@contextlib.contextmanager
def atomic_output(path: str, mode: str = "w"):
    """A file written under a temp name beside ``path`` and renamed onto it only when complete (text: UTF-8, ``\\n``)."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8", "newline": "\n"})) as f:
            yield f
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the output from the user's group
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def read_conll_predictions(path: str) -> Tuple[List[List[str]], List[List[str]]]:
    """(gold, predicted) tags per sentence of a ``token<TAB>gold<TAB>prediction`` file that ``predict_conll`` wrote."""
    gold: List[List[str]] = [[]]
    pred: List[List[str]] = [[]]
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                if gold[-1]:
                    gold.append([])
                    pred.append([])
                continue
            _, g, p = line.rstrip("\n").split("\t")
            gold[-1].append(g)
            pred[-1].append(p)
    return [g for g in gold if g], [p for p in pred if p]


def predict_conll(task, model, input_path: str, output_path: str, **kwargs) -> Optional[Tuple[float, float, float]]:
    """Tag a CoNLL file; returns entity (P, R, F1) when it carries gold tags."""
    from ..data.conll import write_conll
    from ..metrics.tagging import span_prf

    sentences = task.read_split(input_path, require_tags=False)
    predictions = predict_tags(task, model, sentences, **kwargs)
    gold = [s.tags for s in sentences] if sentences[0].tags is not None else None
    with atomic_output(output_path) as f:
        if gold is None:
            write_conll(f, [(s.words, p) for s, p in zip(sentences, predictions)])
        else:
            columns = [[f"{g}\t{p}" for g, p in zip(gs, ps)] for gs, ps in zip(gold, predictions)]
            write_conll(f, [(s.words, c) for s, c in zip(sentences, columns)])
    return span_prf(gold, predictions) if gold is not None else None


def split_text(lines: Sequence[str], documents: bool):
    """Per input line, its sentences as lists of ``(word, start, end)`` (offsets into the line)."""
    from ..data.conll import words_with_offsets

    splitter = None
    if documents:
        from preprocess.sentences import SentenceSplitter

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
        if taken != len(words):  # the splitter only collapses whitespace, so this cannot happen; never drop words
            sentences.append(words[taken:])
        out.append([s for s in sentences if s])
    return out


def predict_text(task, model, input_path: str, output_path: str, documents: bool = True, **kwargs) -> int:
    """Tag raw text, one sentence/document per line, into JSON lines of entity spans; returns the span count."""
    from ..data.conll import Sentence
    from ..metrics.tagging import get_entities

    lines = []
    with open(input_path, "rb") as f:
        for number, raw in enumerate(f.read().split(b"\n"), start=1):
            try:
                lines.append(raw.decode("utf-8").rstrip("\r"))
            except UnicodeDecodeError as e:
                raise PredictError(f"{input_path}:{number}: not valid UTF-8 (byte 0x{raw[e.start]:02x})") from None
    if lines and lines[-1] == "":
        lines.pop()
    per_line = split_text(lines, documents)
    flat = [Sentence(words=[w for w, _, _ in s]) for sentences in per_line for s in sentences]
    predictions = predict_tags(task, model, flat, **kwargs) if flat else []
    count, k = 0, 0
    with atomic_output(output_path) as f:
        for number, (line, sentences) in enumerate(zip(lines, per_line), start=1):
            spans = []
            for words in sentences:
                for kind, a, b in get_entities(predictions[k]):
                    start, end = words[a][1], words[b - 1][2]
                    spans.append({"start": start, "end": end, "type": kind, "text": line[start:end]})
                k += 1
            count += len(spans)
            f.write(json.dumps({"line": number, "spans": spans}, ensure_ascii=False) + "\n")
    return count


def predict_examples(task, model, examples, max_tokens: int = 4096, max_sentences: int = 64, progress=True):
    """One JSON-able row per example (input order): ``id``, ``line``, ``pred``, ``probabilities`` and, for
    labelled examples, ``gold``; plus the criterion's logging output over all of them (None when unlabelled)."""
    from fairseq import utils
    from tqdm import tqdm

    from ..criterions.bio_sentence_prediction import BioSentencePredictionCriterion

    criterion = BioSentencePredictionCriterion(None, task)
    dataset = task.build_dataset(examples, shuffle=False)
    device = next(model.parameters()).device
    kind, labels = task.kind, task.labels
    outputs = [None] * len(examples)
    with torch.no_grad(), tqdm(total=len(examples), unit="ex", disable=not progress, file=sys.stderr) as bar:
        for indices in batches(dataset, max_tokens, max_sentences):
            sample = dataset.collater([dataset[i] for i in indices])
            sample = utils.move_to_cuda(sample) if device.type == "cuda" else sample
            pooled = criterion.pool(model, sample).cpu()
            for i, row in zip(sample["id"].tolist(), pooled):
                outputs[i] = row
            bar.update(len(indices))
    pooled = torch.stack(outputs)
    predicted = criterion.predict(pooled).tolist()
    rows = []
    for ex, p, out in zip(examples, predicted, pooled):
        row = {"id": ex.id, "line": ex.line}
        if kind == "classification":
            row.update(pred=labels[p], probabilities=dict(zip(labels, torch.softmax(out, -1).tolist())))
        elif kind == "multilabel":
            row.update(pred=[int(v) for v in p], probabilities=torch.sigmoid(out).tolist())
        else:
            row.update(pred=p)
        if ex.label is not None:
            row["gold"] = [int(v) for v in ex.label] if kind == "multilabel" else ex.label
        rows.append(row)
    targets = task.targets(examples)
    documents = task.documents(examples)  # sentences of documents (BLUE's HoC): scored per document
    documents = None if documents is None else torch.as_tensor(documents)
    scored = criterion.score(pooled, torch.as_tensor(targets), documents) if targets is not None else None
    return rows, scored


def sentence_metrics(logging_output) -> dict:
    """The corpus-level metrics (percentages) the criterion derives from its summed statistics."""
    from fairseq import metrics

    from ..criterions.bio_sentence_prediction import BioSentencePredictionCriterion

    with metrics.aggregate(new_root=True) as agg:
        BioSentencePredictionCriterion.reduce_metrics([{"loss": 0.0, "sample_size": 1, **logging_output}])
        values = agg.get_smoothed_values()
    return {k: v for k, v in values.items() if k not in ("loss", "windows")}


def read_examples(task, input_path: str, split: str = "test"):
    """The examples of ``input_path`` read as the task reads its splits, with their labels when the file has them."""
    from ..data.sentence_data import SentenceDataError

    cfg = task.cfg
    if str(cfg.format) == "pubmedqa" or os.path.isdir(input_path):
        data = input_path if os.path.isdir(input_path) else os.path.dirname(os.path.abspath(input_path))
        overrides = {"data": data, "valid_from_train": 0}
        if not os.path.isdir(input_path):
            overrides["train_file"] = os.path.basename(input_path)
    else:
        overrides = {"data": os.path.dirname(os.path.abspath(input_path)), "valid_from_train": 0, "test_file":
                     os.path.basename(input_path)}  # fmt: skip
        split = "test"
    saved = {k: getattr(cfg, k) for k in overrides}
    try:
        for key, value in overrides.items():
            setattr(cfg, key, value)
        try:
            task.read_split(split, check=False)
        except SentenceDataError:  # no label column / field: a file to predict, not to score
            return task.read_split(split, require_labels=False)
        return task.read_split(split)
    finally:
        for key, value in saved.items():
            setattr(cfg, key, value)


def predict_sentence_file(task, model, input_path: str, output_path: str, split: str = "test", **kwargs):
    """Predict every example of ``input_path`` into JSON lines; returns the metrics when it has labels, else None."""
    rows, scored = predict_examples(task, model, read_examples(task, input_path, split), **kwargs)
    with atomic_output(output_path) as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return sentence_metrics(scored) if scored is not None else None


def predict_questions(task, model, squad, max_tokens: int = 4096, max_sentences: int = 64, progress=True):
    """One JSON-able row per question of ``squad`` (file order): ``id``, ``question``, ``answers`` and, when the
    file has answers, ``gold``; plus the criterion's logging output over all of them (None when unlabelled)."""
    from fairseq import utils
    from tqdm import tqdm

    from ..criterions.bio_extractive_qa import BioExtractiveQACriterion
    from ..data.squad import gold_texts

    criterion = BioExtractiveQACriterion(None, task)
    dataset = task.build_dataset(squad)
    device = next(model.parameters()).device
    answers: List[Optional[list]] = [None] * len(squad.examples)
    with torch.no_grad(), tqdm(total=len(answers), unit="q", disable=not progress, file=sys.stderr) as bar:
        for indices in batches(dataset, max_tokens, max_sentences):
            sample = dataset.collater([dataset[i] for i in indices])
            sample = utils.move_to_cuda(sample) if device.type == "cuda" else sample
            start_logits, end_logits = criterion.span_logits(model, sample)
            for i, ranked in zip(sample["id"].tolist(), criterion.answers(start_logits, end_logits, sample)):
                answers[i] = ranked
            bar.update(len(indices))
    rows = []
    for ex, ranked in zip(squad.examples, answers):
        row = {"id": ex.id, "question": ex.question, "answers": ranked}
        if ex.answers is not None:
            row["gold"] = gold_texts(ex)
        rows.append(row)
    scored = criterion.score(answers, [r["gold"] for r in rows]) if squad.labelled else None
    return rows, scored


def qa_metrics(logging_output) -> dict:
    """SQuAD EM/F1 and BioASQ factoid strict/lenient accuracy and MRR (percentages), as the criterion derives them."""
    from fairseq import metrics

    from ..criterions.bio_extractive_qa import SUMS, BioExtractiveQACriterion

    with metrics.aggregate(new_root=True) as agg:
        BioExtractiveQACriterion.reduce_metrics([{"loss": 0.0, "sample_size": 1, **logging_output}])
        values = agg.get_smoothed_values()
    return {k: v for k, v in values.items() if k not in ("loss", "windows", *SUMS)}


def group_snippet_rows(rows: List[dict]) -> List[dict]:
    """BioBERT's BioASQ factoid answers: the rows of one question's snippets (ids ``<question id>_<nnn>``) become one
    row (first-seen order) with the question id, its ``snippets``, the answers of all of them merged
    (``metrics.qa.merge_snippet_answers``) and their gold answers together."""
    from ..metrics.qa import merge_snippet_answers, snippet_question_id

    groups: Dict[str, List[dict]] = {}
    for row in rows:
        groups.setdefault(snippet_question_id(str(row["id"])), []).append(row)
    grouped = []
    for question_id, members in groups.items():
        row = {"id": question_id, "question": members[0]["question"], "snippets": [m["id"] for m in members],
               "answers": merge_snippet_answers([a for m in members for a in m["answers"] or ()])}  # fmt: skip
        if "gold" in members[0]:
            row["gold"] = list(dict.fromkeys(g for m in members for g in m["gold"]))
        grouped.append(row)
    return grouped


def predict_qa_file(task, model, input_path: str, output_path: str, group_snippets=False, **kwargs) -> Optional[dict]:
    """Answer every question of a SQuAD file into JSON lines; returns the metrics when it has answers, else None.
    ``group_snippets``: one row per BioASQ question from its snippets' n-best answers (``group_snippet_rows``)."""
    squad = task.read_file(input_path, require_answers=None)
    top_answers = task.cfg.top_answers
    if group_snippets:  # BioBERT pools each snippet's whole n-best list
        task.cfg.top_answers = task.cfg.n_best
    try:
        rows, scored = predict_questions(task, model, squad, **kwargs)
    finally:
        task.cfg.top_answers = top_answers
    if group_snippets:
        rows = group_snippet_rows(rows)
        if scored is not None:
            from ..criterions.bio_extractive_qa import BioExtractiveQACriterion

            scored = BioExtractiveQACriterion.score([r["answers"] for r in rows], [r["gold"] for r in rows])
    with atomic_output(output_path) as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return qa_metrics(scored) if scored is not None else None


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="fairseq-bio-predict", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--checkpoint", required=True,
        help="fine-tuned bio_tagging, bio_sentence_prediction or bio_extractive_qa checkpoint (.pt)",
    )  # fmt: skip
    parser.add_argument(
        "--input", required=True,
        help="tagging: CoNLL file (token[<TAB>tag]) or raw text (one per line); sentence level: a TSV / JSON lines "
        "file in the task's format, or PubMedQA's ori_pqal.json (or its directory); extractive QA: a SQuAD JSON file",
    )  # fmt: skip
    parser.add_argument(
        "--output", required=True,
        help="CoNLL predictions, or JSON lines (spans for text input; one row per example); never the input, and "
        "not an existing file unless --overwrite",
    )  # fmt: skip
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    parser.add_argument(
        "--format", choices=["auto", "conll", "text"], default="auto",
        help="tagging input format (auto: by content: token<TAB>tag lines are CoNLL, whatever the file's name)",
    )  # fmt: skip
    parser.add_argument(
        "--sentences", action="store_true", help="text input: each line is one sentence (default: documents, split)"
    )
    parser.add_argument("--split", default="test", help="PubMedQA: the split of task.split_file to predict")
    parser.add_argument(
        "--group-snippets", action="store_true",
        help="extractive QA: one answer list per BioASQ question from its snippet entries <id>_<nnn> (BioBERT's merge)",
    )  # fmt: skip
    parser.add_argument("--vocab", default=None, help="dir with dict.txt + bpe.json (default: beside the checkpoint)")
    parser.add_argument("--max-tokens", type=int, default=4096, help="tokens per batch (padding included)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch")
    parser.add_argument("--cpu", action="store_true", help="run on the CPU even when a GPU is present")
    parser.add_argument("--fp16", action="store_true", help="half precision (GPU)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from ..data.conll import sniff_format

    if not os.path.exists(args.input):
        raise PredictError(f"{args.input}: not found")
    check_output(args.output, [args.input, args.checkpoint], args.overwrite)
    task, model = load_fine_tuned(args.checkpoint, args.vocab, args.cpu, args.fp16)
    _ = task.word_encoder  # the tokenizer is set up with the model (its import alone can take 2 s), not per input
    options = dict(max_tokens=args.max_tokens, max_sentences=args.batch_size, progress=not args.quiet)
    start = time.perf_counter()

    def wrote(what: str = "") -> None:  # the time of reading, encoding, the forward passes and writing
        print(f"wrote {args.output}{what} in {time.perf_counter() - start:.2f} s")

    try:
        if task.task_name == QA:
            scores = predict_qa_file(task, model, args.input, args.output, args.group_snippets, **options)
            wrote()
            if scores is not None:
                print(" ".join(f"{name} {value:.2f}" for name, value in scores.items()))
        elif hasattr(task, "kind"):  # bio_sentence_prediction
            scores = predict_sentence_file(task, model, args.input, args.output, split=args.split, **options)
            wrote()
            if scores is not None:
                print(" ".join(f"{name} {value:.2f}" for name, value in scores.items()))
        elif (args.format if args.format != "auto" else sniff_format(args.input)) == "conll":
            scores = predict_conll(task, model, args.input, args.output, **options)
            wrote()
            if scores is not None:
                p, r, f1 = scores
                print(f"entity precision {100 * p:.2f} recall {100 * r:.2f} F1 {100 * f1:.2f}")
        else:
            count = predict_text(task, model, args.input, args.output, documents=not args.sentences, **options)
            wrote(f": {count} entity spans")
    except FileNotFoundError as e:
        raise PredictError(str(e)) from None


def cli_main(argv=None) -> None:
    run_cli("fairseq-bio-predict", main, argv)
