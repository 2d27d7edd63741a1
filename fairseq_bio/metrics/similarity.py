"""Sentence-similarity metric (BIOSSES in BLURB; BIOSSES and MedSTS in BLUE): Pearson's r.

BLURB (Gu et al. 2020 §4.4) and BLUE (``eval_sts.py``: pandas ``Series.corr``, i.e. Pearson) score
the predicted similarity against the gold score with Pearson's correlation coefficient

    r = sum_i (x_i - mean x)(y_i - mean y) / sqrt(sum_i (x_i - mean x)^2 * sum_i (y_i - mean y)^2)

Pearson is not a mean over batches, so it is computed either from the accumulated predictions
(:func:`pearson`, two-pass, exact to rounding) or from summable sufficient statistics
(:class:`PearsonSums`: n, sums, sums of squares and cross products, which fairseq's logging outputs
add up across batches and workers). Where r is undefined (fewer than two pairs, or constant
predictions or gold; scipy returns nan) both give 0.0, so a model that predicts a constant ranks
below any that correlates and checkpoint selection stays ordered.
"""

import math
from dataclasses import dataclass
from typing import Sequence, Tuple

from .sums import Sums


def _finite_pairs(pred: Sequence[float], gold: Sequence[float]) -> Tuple[list, list]:
    pred, gold = [float(v) for v in pred], [float(v) for v in gold]
    if len(pred) != len(gold):
        raise ValueError(f"{len(gold)} gold scores but {len(pred)} predicted scores")
    for i, (p, g) in enumerate(zip(pred, gold)):
        if not (math.isfinite(p) and math.isfinite(g)):
            raise ValueError(f"pair {i}: non-finite score (predicted {p}, gold {g})")
    return pred, gold


@dataclass
class PearsonSums(Sums):
    """Summable sufficient statistics of Pearson's r: count, sums, sums of squares and of cross
    products."""

    n: int = 0
    sx: float = 0.0
    sy: float = 0.0
    sxx: float = 0.0
    syy: float = 0.0
    sxy: float = 0.0

    def value(self) -> float:
        """Pearson's r of the pairs summed so far; 0.0 where undefined."""
        if self.n < 2:
            return 0.0
        vx = self.sxx - self.sx * self.sx / self.n
        vy = self.syy - self.sy * self.sy / self.n
        # Rounding can leave a tiny positive residue for constant data: treat variance at rounding
        # level as zero.
        if vx <= 1e-12 * max(self.sxx, 1.0) or vy <= 1e-12 * max(self.syy, 1.0):
            return 0.0
        r = (self.sxy - self.sx * self.sy / self.n) / math.sqrt(vx * vy)
        return max(-1.0, min(1.0, r))


def pearson_sums(pred: Sequence[float], gold: Sequence[float]) -> PearsonSums:
    """Sufficient statistics of one batch of (predicted, gold) scores."""
    pred, gold = _finite_pairs(pred, gold)
    return PearsonSums(
        len(pred),
        math.fsum(pred),
        math.fsum(gold),
        math.fsum(x * x for x in pred),
        math.fsum(y * y for y in gold),
        math.fsum(x * y for x, y in zip(pred, gold)),
    )


def pearson(pred: Sequence[float], gold: Sequence[float]) -> float:
    """Pearson's r of accumulated (predicted, gold) scores, two-pass; 0.0 where undefined (scipy:
    nan)."""
    pred, gold = _finite_pairs(pred, gold)
    n = len(pred)
    if n < 2:
        return 0.0
    mx, my = math.fsum(pred) / n, math.fsum(gold) / n
    dx, dy = [x - mx for x in pred], [y - my for y in gold]
    vx, vy = math.fsum(d * d for d in dx), math.fsum(d * d for d in dy)
    if vx == 0.0 or vy == 0.0:
        return 0.0
    r = math.fsum(a * b for a, b in zip(dx, dy)) / math.sqrt(vx * vy)
    return max(-1.0, min(1.0, r))


__all__ = ["PearsonSums", "pearson", "pearson_sums"]
