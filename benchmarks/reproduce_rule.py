"""The rule that judges a finding (``reproduce_findings.Finding``) reproduced or not: the verdict
words, ``verdict`` (the rule; ``RULE`` says it in words on the page), per-seed ``Measure``s,
``guard``, which refuses a modelling row whose sides learned nothing measurable, and ``evaluate``,
which applies both to a finding and its step's record (``benchmarks/reproduce.py``)."""

import statistics
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

REPRODUCED, DIRECTION, NOT_REPRODUCED = "reproduced", "direction reproduced", "not reproduced"
NO_COMPARISON = "no comparison"  # a modelling row whose sides fail the guard (``guard``)
VERDICTS = (REPRODUCED, DIRECTION, NOT_REPRODUCED, NO_COMPARISON)
VALUE, SIGN, NONE = (
    "value",
    "sign",
    "none",
)  # the paper's arithmetic, a difference, no substantial difference
NO_DIFFERENCE = 1.0  # points (F1 x 100): the fixed margin of "no substantial difference"
CLAIM_WORDS = {
    VALUE: "value",
    SIGN: "difference",
    NONE: "no difference",
}  # as the page's rule names them


def verdict(
    claim: str,
    paper: float,
    ours: Optional[float],
    spread: Optional[float] = None,
    tolerance: float = 0.0,
) -> str:
    """Reproduced, direction reproduced or not reproduced, for ``ours`` against ``paper`` (``RULE``
    says it in words; ``guard`` gives the fourth verdict).

    - VALUE: reproduced when |ours - paper| <= ``tolerance`` (the rounding of the paper's inputs);
    - SIGN: reproduced when ours has the paper's sign and |ours| exceeds ``spread`` (std over seeds
      or repeats, 0 for a deterministic count); direction reproduced when it has the sign but not
      beyond the spread, or when there is no spread (one run); not reproduced when the sign differs
      (or ours is 0);
    - NONE: reproduced when |ours| <= ``tolerance``, a fixed margin (the spread does not widen it).
    Nothing measured (``ours`` None) is not reproduced."""
    if ours is None:
        return NOT_REPRODUCED
    if claim == VALUE:
        return REPRODUCED if abs(ours - paper) <= tolerance else NOT_REPRODUCED
    if claim == NONE:
        return REPRODUCED if abs(ours) <= tolerance else NOT_REPRODUCED
    if claim != SIGN:
        raise ValueError(f"unknown claim {claim!r}; known: {VALUE}, {SIGN}, {NONE}")
    if ours == 0 or (ours > 0) != (paper > 0):
        return NOT_REPRODUCED
    return REPRODUCED if spread is not None and abs(ours) > spread else DIRECTION


@dataclass(frozen=True)
class Measure:
    """A finding's number, the paper's or ours: ``effect`` is what the verdict compares (a
    difference, or the value of an arithmetic claim), ``text`` how the table shows it, ``spread``
    ours' std over seeds or repeats (0: a deterministic measure; None: one run), ``values`` ours per
    seed (the plot's dots)."""

    effect: float
    text: str
    spread: Optional[float] = None
    values: Sequence[float] = ()


def spread_of(values: Sequence[float]) -> Optional[float]:
    """The sample std of per-seed values, None for fewer than two."""
    return statistics.stdev(values) if len(values) > 1 else None


def differences(values: Sequence[float], text: Callable[[float, str], str]) -> Measure:
    """The mean of per-seed differences, their spread, and ``text(mean, "± spread, n seeds")``."""
    mean, spread = statistics.fmean(values), spread_of(values)
    runs_text = f"± {spread:.2f} over {len(values)} seeds" if spread is not None else "one seed"
    return Measure(mean, text(mean, runs_text), spread, list(values))


# --- the guard on modelling rows -------------------------------------------------------------------------------------


class NotAComparison(Exception):
    """Raised by ``guard`` when a side of a modelling row learned nothing measurable (or that is not
    recorded); its message says why, and the row's verdict is NO_COMPARISON."""


@dataclass(frozen=True)
class Side:
    """One side of a modelling comparison: its mean score over fine-tuning seeds and their
    ``spread`` (std; None: one seed, or not recorded), the mean of the same architecture from
    random initialisation (``random``; None: no such run recorded) and the trivial baseline's
    score (``trivial``: all-O tagging, the majority class; None: not recorded). A side that is
    itself the random-init run (``is_random``) is held to the trivial baseline only."""

    name: str
    mean: float
    spread: Optional[float]
    random: Optional[float]
    trivial: Optional[float]
    is_random: bool = False


def side(
    name: str,
    values: Sequence[float],
    random: Optional[Sequence[float]] = None,
    trivial: Optional[float] = None,
    is_random: bool = False,
) -> Side:
    """A ``Side`` from per-seed scores (and the random-init run's, when there is one)."""
    random_mean = statistics.fmean(random) if random else None
    return Side(name, statistics.fmean(values), spread_of(values), random_mean, trivial, is_random)


def guard(sides: Sequence[Side]) -> None:
    """NotAComparison unless every side beats the same architecture from random init and the
    trivial baseline by more than its own seed spread; the message says, per side, what failed."""
    reasons = []
    for s in sides:
        against = [("the trivial baseline", s.trivial, "trivial baseline")]
        if not s.is_random:
            against.insert(0, ("random init", s.random, "random-init run"))
        problems, unjudged = [], False
        for what, score, missing in against:
            if score is None:
                problems.append(f"no {missing} recorded")
                continue
            margin = s.mean - score
            if s.spread is None and margin > 0:
                unjudged = True
            elif margin <= (s.spread or 0.0):
                within = f", not more than its seed spread {s.spread:.2f}" if s.spread else ""
                problems.append(f"{margin:+.2f} over {what} ({score:.2f}){within}")
        if unjudged:
            problems.append("no seed spread recorded to judge its margins by")
        if problems:
            reasons.append(f"{s.name} ({s.mean:.2f}): {', '.join(problems)}")
    if reasons:
        raise NotAComparison("; ".join(reasons))


@dataclass(frozen=True)
class Row:
    """A finding evaluated: the paper's measure, ours (None: not measured), the verdict, the record
    it came from, why it is not reproduced (``note``) and what else its step measured."""

    finding: Any  # a reproduce_findings.Finding
    paper: Measure
    ours: Optional[Measure]
    verdict: str
    record: Optional[Dict]
    note: str = ""
    detail: str = ""


def measured(finding: Any, record: Dict) -> Tuple[Measure, Optional[List[Side]], str]:
    """Ours, the sides (None: not a modelling row) and the detail of ``finding`` from its step's
    record: computed from the per-seed ``results``, or read from ``published`` in a record
    transcribed from an earlier page whose per-seed results were not kept."""
    if "published" in record:
        entry = record["published"][finding.key]
        ours = Measure(**entry["ours"])
        sides = entry.get("sides")
        if finding.sides is not None and sides is None:
            raise KeyError(f"{finding.key}: no sides")
        return ours, sides and [Side(**s) for s in sides], entry.get("detail", "")
    results = record["results"]
    ours = finding.ours(results)
    sides = finding.sides(results) if finding.sides else None
    return ours, sides, finding.detail(results) if finding.detail else ""


def evaluate(finding: Any, record: Optional[Dict]) -> Row:
    """``finding`` against ``record`` (its step's, or None when that has not run): the verdict of
    ``verdict``, or NO_COMPARISON when a side of a modelling row fails ``guard``."""
    paper = finding.paper()
    ours, sides, note, detail = None, None, "", ""
    if finding.ours is None:
        note = finding.why
    elif record is None:
        note = f"not run yet: python benchmarks/reproduce.py --only {finding.key}"
    elif finding.key not in record.get("published", {finding.key: None}):
        # a record transcribed before the finding read what it reads now
        note = (
            f"not run yet at its step's budget: python benchmarks/reproduce.py --only {finding.key}"
        )
    else:
        try:
            ours, sides, detail = measured(finding, record)
        except (KeyError, TypeError, ValueError, statistics.StatisticsError) as e:
            note = f"its step's results lack what it reads ({type(e).__name__}: {e})"
    spread = ours.spread if ours else None
    result = verdict(
        finding.claim, paper.effect, ours.effect if ours else None, spread, finding.tolerance
    )
    if sides is not None:
        try:
            guard(sides)
        except NotAComparison as e:
            result, note = NO_COMPARISON, str(e)
    return Row(finding, paper, ours, result, record, note, detail)


RULE = """**The rule.** Each finding is one of three claims, and ours is the same comparison measured here:

- *value* (the paper's own arithmetic): **reproduced** when ours is within the rounding of the paper's inputs
  (stated per row), else **not reproduced**;
- *difference*: **reproduced** when ours has the paper's sign and exceeds its spread (the standard deviation over
  fine-tuning seeds or timing runs; 0 for a deterministic count); **direction reproduced** when it has the sign but
  not beyond the spread, or comes from one run (no spread to compare with); **not reproduced** when its sign is the
  opposite;
- *no difference* (the paper found none worth having): **reproduced** when |ours| is at most a fixed margin stated
  per row (the seeds' spread does not widen it), else **not reproduced**.

A modelling row (models pretrained, distilled or fine-tuned here) is judged only when each of its two sides learned
something: each must beat the same architecture fine-tuned from random initialisation and the trivial baseline
(all-O tagging for NER, the majority training label for relations) by more than its own seed spread. Otherwise
the row is **no comparison**, with the reason, whatever its difference says; a step that recorded no random-init
run (or no baseline, or one seed) cannot show this, and its rows are no comparison too.

A finding nothing here measures is **not reproduced**, and says why. Levels are not compared: our models, corpora
and budgets are a small fraction of the papers', so a number is set beside the paper's for its sign and size only."""
