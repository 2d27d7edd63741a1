"""Extractive-QA metrics: SQuAD exact match / token F1 and BioASQ factoid strict / lenient accuracy
and MRR.

SQuAD scores are those of the official ``evaluate-v1.1.py`` / ``evaluate-v2.0.py`` (Rajpurkar et
al.), v2.0's unanswerable questions and best null threshold included; BioASQ factoid scores those
of BioASQ/Evaluation-Measures (Task b phase B, as BioBERT and BioMegatron report them), with
BioBERT's merge of per-snippet answers into one ranked list per question
(``merge_snippet_answers``)."""

import re
import string
from collections import Counter
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from .sums import Sums

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)
BIOASQ_MAX_ANSWERS = 5

Answer = Union[str, Sequence[str]]


def normalize_answer(text: str) -> str:
    """SQuAD's answer normalisation: lower case, no ASCII punctuation (``string.punctuation``), no
    articles (``a``/``an``/``the`` as whole words), single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _gold_answers(gold: Union[str, Sequence[str]], question: Optional[int] = None) -> List[str]:
    """Gold answers that survive normalisation, or ``[""]`` (unanswerable) as SQuAD v2.0: the empty
    prediction then scores EM = F1 = 1 on it and any other 0."""
    if isinstance(gold, str):
        gold = [gold]
    for a in gold:
        if not isinstance(a, str):
            where = f"question {question}: " if question is not None else ""
            raise ValueError(f"{where}gold answer {a!r} is not a string")
    return [a for a in gold if normalize_answer(a)] or [""]


def _token_f1(prediction: str, gold: str) -> float:
    """Bag-of-tokens F1 of the normalised token lists (``Counter`` intersection)."""
    pred_tokens, gold_tokens = normalize_answer(prediction).split(), normalize_answer(gold).split()
    # 1 only when both are empty, as v2.0 (v1.1 scores that 0 but has no empty gold answer)
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if not same:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_exact_match(prediction: str, gold: Union[str, Sequence[str]]) -> float:
    """1.0 when the normalised prediction equals a normalised gold answer, else 0.0."""
    return max(
        float(normalize_answer(prediction) == normalize_answer(a)) for a in _gold_answers(gold)
    )


def squad_f1(prediction: str, gold: Union[str, Sequence[str]]) -> float:
    """SQuAD token F1 of the prediction, best over the gold answers."""
    return max(_token_f1(prediction, a) for a in _gold_answers(gold))


@dataclass
class SquadSums(Sums):
    """Summable SQuAD sums: exact matches, F1 added up over questions, and the question count."""

    exact: float = 0.0
    f1: float = 0.0
    total: int = 0

    def value(self) -> Tuple[float, float]:
        """(exact match, F1) as fractions; zeros for no questions."""
        return (self.exact / self.total, self.f1 / self.total) if self.total else (0.0, 0.0)


def _question_scores(predictions: Sequence[str], golds: Sequence[Union[str, Sequence[str]]]):
    """Per question: (exact, F1), the official scripts' raw scores."""
    predictions, golds = list(predictions), list(golds)
    if len(predictions) != len(golds):
        raise ValueError(f"{len(golds)} questions but {len(predictions)} predictions")
    scores = []
    for i, (prediction, gold) in enumerate(zip(predictions, golds)):
        if not isinstance(prediction, str):
            raise ValueError(f"question {i}: prediction {prediction!r} is not a string")
        answers = _gold_answers(gold, i)
        exact = max(float(normalize_answer(prediction) == normalize_answer(a)) for a in answers)
        scores.append((exact, max(_token_f1(prediction, a) for a in answers)))
    return scores


def has_answer(gold: Union[str, Sequence[str]]) -> bool:
    """Whether a question has an answer (SQuAD v2.0's ``bool(qa["answers"])``: a non-empty gold list
    or string)."""
    return bool(gold)


def squad_sums(predictions: Sequence[str], golds: Sequence[Union[str, Sequence[str]]]) -> SquadSums:
    """SQuAD sums of aligned predictions and gold answer lists (``[]`` or ``""``: unanswerable,
    SQuAD v2.0); each question's EM and F1 are the best over its gold answers."""
    scores = _question_scores(predictions, golds)
    return SquadSums(sum(e for e, _ in scores), sum(f for _, f in scores), len(scores))


def squad_v2_sums(
    predictions: Sequence[str], golds: Sequence[Union[str, Sequence[str]]]
) -> Tuple[SquadSums, SquadSums]:
    """(all questions, the ``HasAns`` ones) SQuAD sums; the ``NoAns`` ones are the difference."""
    predictions, golds = list(predictions), list(golds)
    answerable = [i for i, gold in enumerate(golds) if has_answer(gold)]
    every = squad_sums(
        predictions, golds
    )  # first: its errors name the question by its index in the file
    return every, squad_sums([predictions[i] for i in answerable], [golds[i] for i in answerable])


def squad_v2_eval(
    predictions: Sequence[str], golds: Sequence[Union[str, Sequence[str]]]
) -> Dict[str, float]:
    """The official ``evaluate-v2.0.py`` output (percentages): ``exact``, ``f1``, ``total`` and
    their ``HasAns_`` / ``NoAns_`` versions for the groups that have questions ("" predicts no
    answer)."""
    every, has = squad_v2_sums(predictions, golds)
    no = SquadSums(every.exact - has.exact, every.f1 - has.f1, every.total - has.total)
    out: Dict[str, float] = {}
    for prefix, sums in (("", every), ("HasAns_", has), ("NoAns_", no)):
        if sums.total:
            exact, f1 = sums.value()
            out.update(
                {
                    f"{prefix}exact": 100 * exact,
                    f"{prefix}f1": 100 * f1,
                    f"{prefix}total": sums.total,
                }
            )
    return out


def best_null_threshold(
    span_predictions: Sequence[str],
    null_score_diffs: Sequence[Optional[float]],
    golds: Sequence[Union[str, Sequence[str]]],
) -> Dict[str, float]:
    """The null score diff threshold that maximises EM and F1 when "" is answered above it and the
    best span otherwise: the official ``find_best_thresh`` (``--na-prob-file``) with the null score
    diffs as "no-answer probabilities" (questions in order of their diff, each switched from "" to
    its span in turn; starts from every question answered "" with threshold 0.0, keeps the first
    best; a diff of None, no span, is never answered). Returns ``best_exact``,
    ``best_exact_thresh``, ``best_f1``, ``best_f1_thresh`` (percentages)."""
    diffs, golds = list(null_score_diffs), list(golds)
    scores = _question_scores(span_predictions, golds)
    if len(diffs) != len(scores):
        raise ValueError(f"{len(scores)} questions but {len(diffs)} null score diffs")
    order = sorted((i for i, d in enumerate(diffs) if d is not None), key=lambda i: diffs[i])
    out: Dict[str, float] = {}
    for k, name in ((0, "exact"), (1, "f1")):
        current = best = float(
            sum(not has_answer(g) for g in golds)
        )  # all "": every unanswerable one right
        threshold = 0.0
        for i in order:
            current += (
                scores[i][k] if has_answer(golds[i]) else (-1.0 if span_predictions[i] else 0.0)
            )
            if current > best:
                best, threshold = current, float(diffs[i])
        out[f"best_{name}"] = 100 * best / len(scores) if scores else 0.0
        out[f"best_{name}_thresh"] = threshold
    return out


def squad_scores(
    predictions: Sequence[str], golds: Sequence[Union[str, Sequence[str]]]
) -> Tuple[float, float]:
    """SQuAD (exact match, F1) as fractions (the official script prints them x 100)."""
    return squad_sums(predictions, golds).value()


def _synonyms(answer: Answer, what: str) -> List[str]:
    """An answer (string, or nested lists of synonyms) flattened and lower-cased as BioASQ's reader
    does."""
    if isinstance(answer, str):
        return [answer.lower()]
    if not isinstance(answer, (list, tuple)):
        raise ValueError(f"{what}: answer {answer!r} is not a string or a list of strings")
    return [synonym for a in answer for synonym in _synonyms(a, what)]


@dataclass
class FactoidSums(Sums):
    """Summable BioASQ factoid sums: strict hits, lenient hits, reciprocal ranks, and the question
    count."""

    strict: float = 0.0
    lenient: float = 0.0
    reciprocal_rank: float = 0.0
    total: int = 0

    def value(self) -> Tuple[float, float, float]:
        """(strict accuracy, lenient accuracy, MRR); zeros for no questions (as the official
        evaluator)."""
        if not self.total:
            return 0.0, 0.0, 0.0
        return (
            self.strict / self.total,
            self.lenient / self.total,
            self.reciprocal_rank / self.total,
        )


def factoid_sums(
    predictions: Sequence[Sequence[Answer]],
    golds: Sequence[Answer],
    max_answers: Optional[int] = BIOASQ_MAX_ANSWERS,
) -> FactoidSums:
    """BioASQ factoid sums of ranked answer lists (each answer a string or synonyms) against gold
    synonym lists.

    As BioASQ/Evaluation-Measures' ``QuestionAnswerEvaluator`` / ``EvaluatorTask1b``: both sides
    lower-cased (``Task1bData.readExactAnswerArray``; nested gold lists flattened) and compared by
    exact string equality, with no other normalisation. *Strict* is 1 when the first answer matches
    a gold synonym, *lenient* when any does, the reciprocal rank 1/k for the first matching answer
    k (0 without one). The evaluator scores whatever list it is given; the challenge caps it at
    five, so answers past ``max_answers`` are ignored."""
    predictions, golds = list(predictions), list(golds)
    if len(predictions) != len(golds):
        raise ValueError(f"{len(golds)} questions but {len(predictions)} ranked answer lists")
    sums = FactoidSums()
    for i, (ranked, gold) in enumerate(zip(predictions, golds)):
        if isinstance(ranked, str):
            raise ValueError(
                f"question {i}: expected a ranked list of answers, got the string {ranked!r}"
            )
        gold_set = set(_synonyms(gold, f"question {i} gold"))
        ranked = list(ranked)[:max_answers] if max_answers is not None else list(ranked)
        rank = next(
            (
                k
                for k, answer in enumerate(ranked, 1)
                if gold_set.intersection(_synonyms(answer, f"question {i}"))
            ),
            None,
        )
        sums.total += 1
        if rank is not None:
            sums.strict += rank == 1
            sums.lenient += 1
            sums.reciprocal_rank += 1 / rank
    return sums


_SNIPPET_ID = re.compile(r"(.+)_\d+")
MAX_FACTOID_ANSWER_CHARS = 100


def snippet_question_id(example_id: str) -> str:
    """The question id of a snippet entry ``<question id>_<nnn>`` (BioBERT's SQuAD form of BioASQ,
    ``transform_n2b_factoid``: one entry per question and snippet); any other id is its own
    question."""
    match = _SNIPPET_ID.fullmatch(example_id)
    return match.group(1) if match else example_id


def clean_factoid_answer(text: str) -> str:
    """BioBERT's answer clean-up before snippets are merged ("" = drop the answer); one rule applies
    at most."""
    if text[-1:] in (",", ".", " "):
        return text[:-1]
    if (
        len(text) > 2
        and text[0] == "("
        and text[-1] == ")"
        and text.count("(") == text.count(")") == 1
    ):
        return text[1:-1]
    if ("(" in text) != (")" in text):
        return ""
    return text


def merge_snippet_answers(
    answers: Sequence[Dict[str, Any]], max_answers: Optional[int] = BIOASQ_MAX_ANSWERS
) -> List[Dict[str, Any]]:
    """One question's ranked answers from the answers of all its snippets (``{"text",
    "probability"}`` each), as ``{"text", "probability"}`` with the summed probability, best first.

    As BioBERT's ``transform_n2b_factoid`` (dmis-lab/biobert-pytorch): answers pooled in order of
    probability, each cleaned (``clean_factoid_answer``), empty or over 100 characters dropped,
    case-insensitive duplicates merged by adding their probabilities (the first spelling kept),
    then ranked by the summed probability."""
    merged: Dict[str, Dict[str, Any]] = {}
    for answer in sorted(
        answers, key=lambda a: -float(a["probability"])
    ):  # stable: file order among ties
        text = clean_factoid_answer(str(answer["text"]))
        if not text or len(text) > MAX_FACTOID_ANSWER_CHARS:
            continue
        entry = merged.setdefault(text.lower(), {"text": text, "probability": 0.0})
        entry["probability"] += float(answer["probability"])
    ranked = sorted(merged.values(), key=lambda a: -a["probability"])
    return ranked[:max_answers] if max_answers is not None else ranked


def factoid_scores(
    predictions: Sequence[Sequence[Answer]],
    golds: Sequence[Answer],
    max_answers: Optional[int] = BIOASQ_MAX_ANSWERS,
) -> Tuple[float, float, float]:
    """BioASQ factoid (strict accuracy, lenient accuracy, MRR) as fractions."""
    return factoid_sums(predictions, golds, max_answers).value()


__all__ = [
    "BIOASQ_MAX_ANSWERS",
    "FactoidSums",
    "MAX_FACTOID_ANSWER_CHARS",
    "SquadSums",
    "best_null_threshold",
    "factoid_scores",
    "factoid_sums",
    "clean_factoid_answer",
    "merge_snippet_answers",
    "normalize_answer",
    "snippet_question_id",
    "squad_exact_match",
    "squad_f1",
    "squad_scores",
    "has_answer",
    "squad_sums",
    "squad_v2_eval",
    "squad_v2_sums",
]
