"""Reader of SQuAD v1.1 / v2.0 JSON (no fairseq import):
``{"data": [{"paragraphs": [{"context", "qas": [{"id",
"question", "answers": [{"text", "answer_start"}], "is_impossible"}]}]}]}``, the form BioBERT
distributes BioASQ factoid questions in (one snippet or abstract per paragraph; train questions
carry one answer, dev/test ones may carry several).

Every answer is checked against its context: ``answer_start`` is a character offset into the context
and the context must read exactly ``text`` there. Each check fails in one line naming the file, the
line of the question's ``"id"`` and the question id. SQuAD v2.0's unanswerable questions
(``"is_impossible": true`` with an empty ``answers`` list; v2.0's ``plausible_answers`` are ignored)
are read only when asked for (``allow_unanswerable``) and then have ``answers == []``; an empty
``answers`` list counts as unanswerable, as the official v2.0 evaluation script counts it
(``bool(qa["answers"])``), and ``is_impossible`` with answers is refused.
"""

import json
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from ..errors import json_error
from ..files import InputError


@dataclass(frozen=True)
class GoldAnswer:
    """One gold answer: its text and where it starts in the context (characters)."""

    text: str
    start: int

    @property
    def end(self) -> int:
        return self.start + len(self.text)


@dataclass
class QAExample:
    """One question about one context (``context_index`` into the file's contexts), its gold answers
    (None when the file has none, ``[]`` when the question is unanswerable), and where it came
    from."""

    id: str
    question: str
    context_index: int
    answers: Optional[List[GoldAnswer]]
    line: int


@dataclass
class SquadFile:
    """The contexts (paragraphs, in file order) and the questions of one file."""

    path: str
    contexts: List[str]
    examples: List[QAExample]

    @property
    def labelled(self) -> bool:
        return bool(self.examples) and self.examples[0].answers is not None

    def context(self, example: QAExample) -> str:
        return self.contexts[example.context_index]

    @property
    def unanswerable(self) -> int:
        """Questions with no answer in their context (SQuAD v2.0)."""
        return sum(ex.answers == [] for ex in self.examples)


def _id_lines(text: str) -> Dict[str, int]:
    """Line of each ``"id": "..."`` in a JSON text (the questions' ids)."""
    lines, line, offset = {}, 1, 0
    for m in re.finditer(r'"id"\s*:\s*"((?:[^"\\]|\\.)*)"', text):
        line += text.count("\n", offset, m.start())
        offset = m.start()
        try:
            key = json.loads(f'"{m.group(1)}"')
        except json.JSONDecodeError:
            continue
        lines.setdefault(key, line)
    return lines


def _show(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def read_squad(
    path: str, require_answers: Optional[bool] = True, allow_unanswerable: bool = False
) -> SquadFile:
    """Contexts and questions of a SQuAD file. ``require_answers``: True (train/valid: every
    question has an answers list), False (answers ignored: a file to predict), None (answers read
    when the file has them: all questions or none). ``allow_unanswerable``: SQuAD v2.0 questions
    without an answer are read (else refused).
    """
    try:
        with open(path, encoding="utf-8-sig") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not valid UTF-8 (byte {e.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(json_error(path, e)) from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise InputError(
            f'{path}:1: no "data" list (SQuAD v1.1: {{"data": [{{"paragraphs": [...]}}]}})'
        )
    lines = _id_lines(text)
    contexts: List[str] = []
    examples: List[QAExample] = []
    seen: Dict[str, int] = {}
    allow_unanswerable = (
        allow_unanswerable or require_answers is False
    )  # answers ignored: any question is read
    for a, article in enumerate(data["data"]):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise InputError(f'{path}: data[{a}] has no "paragraphs" list')
        for p, paragraph in enumerate(paragraphs):
            where = f"data[{a}].paragraphs[{p}]"
            if not isinstance(paragraph, dict):
                raise InputError(f"{path}: {where} is not an object")
            context, qas = paragraph.get("context"), paragraph.get("qas")
            if not isinstance(context, str):
                raise InputError(f'{path}: {where} has no "context" string')
            if not isinstance(qas, list):
                raise InputError(f'{path}: {where} has no "qas" list')
            if not context.strip():
                first = qas[0].get("id") if qas and isinstance(qas[0], dict) else None
                at = (
                    f"{path}:{lines.get(first, 1)}: question {first}"
                    if first is not None
                    else f"{path}: {where}"
                )
                raise InputError(f"{at}: empty context")
            contexts.append(context)
            for q, qa in enumerate(qas):
                at = f"{where}.qas[{q}]"
                examples.append(
                    _question(
                        path, at, qa, len(contexts) - 1, context, lines, seen, allow_unanswerable
                    )
                )
    if not examples:
        raise InputError(f"{path}: no questions")
    labelled = [ex.answers is not None for ex in examples]
    if require_answers is None and any(labelled) and not all(labelled):
        ex = examples[labelled.index(False)]
        raise InputError(
            f'{path}:{ex.line}: question {ex.id}: no "answers", but other questions have them'
        )
    if require_answers is False or (require_answers is None and not any(labelled)):
        for ex in examples:
            ex.answers = None
    elif require_answers:
        for ex in examples:
            if ex.answers is None:
                raise InputError(f'{path}:{ex.line}: question {ex.id}: no "answers" list')
    return SquadFile(path, contexts, examples)


V2_HINT = "SQuAD v2.0 unanswerable questions are read with task.version_2_with_negative=true"


def _question(
    path, where, qa, context_index, context, lines, seen, allow_unanswerable=False
) -> QAExample:
    if not isinstance(qa, dict):
        raise InputError(f"{path}: {where} is not an object")
    qid = qa.get("id")
    if not isinstance(qid, (str, int)) or isinstance(qid, bool) or str(qid) == "":
        raise InputError(f'{path}: {where} has no "id"')
    qid = str(qid)
    line = lines.get(qid, 1)
    at = f"{path}:{line}: question {qid}"
    if qid in seen:
        raise InputError(f"{at}: the id is used twice (first at line {seen[qid]})")
    seen[qid] = line
    question = qa.get("question")
    if not isinstance(question, str) or not question.strip():
        raise InputError(f'{at}: no "question" text')
    impossible = qa.get("is_impossible", False)
    if not isinstance(impossible, bool):
        raise InputError(f'{at}: "is_impossible" {impossible!r} is not true or false')
    raw = qa.get("answers")
    answers = None
    if raw is not None:
        if not isinstance(raw, list):
            raise InputError(f'{at}: "answers" is not a list')
        if impossible and raw:
            raise InputError(
                f'{at}: is_impossible, but "answers" has {len(raw)} (v2.0: an empty list)'
            )
        answers = [_answer(at, k, ans, context) for k, ans in enumerate(raw)]
    elif impossible:
        answers = []
    if (impossible or answers == []) and not allow_unanswerable:
        what = "is_impossible" if impossible else "empty answers list"
        raise InputError(f"{at}: {what}: an unanswerable question ({V2_HINT})")
    return QAExample(qid, question, context_index, answers, line)


def _answer(at: str, k: int, ans, context: str) -> GoldAnswer:
    if not isinstance(ans, dict):
        raise InputError(f"{at}: answers[{k}] is not an object")
    text, start = ans.get("text"), ans.get("answer_start")
    if not isinstance(text, str) or not text.strip():
        raise InputError(f'{at}: answers[{k}] has no "text"')
    if isinstance(start, bool) or not isinstance(start, int):
        raise InputError(f'{at}: answers[{k}] "answer_start" {start!r} is not a character offset')
    if not 0 <= start <= len(context) - len(text):
        raise InputError(
            f"{at}: answers[{k}] {_show(text)} at answer_start {start} runs past the context ({len(context)} chars)"
        )
    found = context[start : start + len(text)]
    if found != text:
        elsewhere = context.find(text)
        hint = (
            f"; the text occurs at {elsewhere}"
            if elsewhere >= 0
            else "; the text is not in the context"
        )
        raise InputError(
            f"{at}: answers[{k}] {_show(text)} is not at answer_start {start} (the context reads {_show(found)} "
            f"there{hint})"
        )
    return GoldAnswer(text, start)


def gold_texts(example: QAExample) -> List[str]:
    """The gold answer texts of a question (distinct, in file order)."""
    return list(dict.fromkeys(a.text for a in example.answers or ()))


def context_words(context: str) -> List[Tuple[str, int, int]]:
    """``(word, start, end)`` of the whitespace-separated words of a context (as the sentence tasks
    split texts)."""
    return [(m.group(), m.start(), m.end()) for m in re.finditer(r"\S+", context)]
