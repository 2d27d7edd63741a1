"""Imbalanced classes (BioMegatron §5.5: "oversampling the minority classes ... and using weighted
cross-entropy"): per-class values given by the user (``w1,w2,...`` in task.labels order, or
``label=w,...``), scikit-learn's ``balanced`` class weights, and oversampling factors.
``criterion.class_weights`` (the weighted cross-entropy) and ``task.oversample`` (train examples of
a class repeated k times) read their options here, so both name classes, count the train labels and
fail on a bad value the same way: one line naming the option."""

import math
from typing import List, Sequence

from ..errors import BioConfigError

BALANCED = "balanced"


def class_counts(label_ids: Sequence[int], labels: Sequence[str], option: str) -> List[int]:
    """Train examples per class of ``labels``; a class without any is a one-line error naming
    ``option`` (balancing would need an infinite weight or factor)."""
    counts = [0] * len(labels)
    for i in label_ids:
        counts[i] += 1
    empty = [name for name, n in zip(labels, counts) if n == 0]
    if empty:
        raise BioConfigError(
            f"{option}: class {empty[0]!r} has no train examples, so it cannot be balanced; give the values explicitly"
        )
    return counts


def balanced_class_weights(
    label_ids: Sequence[int], labels: Sequence[str], option: str
) -> List[float]:
    """n / (K x n_c) per class c of ``labels`` over the ``n`` train ``label_ids`` (scikit-learn's
    "balanced")."""
    counts = class_counts(label_ids, labels, option)
    return [len(label_ids) / (len(labels) * n) for n in counts]


def balanced_oversampling(
    label_ids: Sequence[int], labels: Sequence[str], option: str
) -> List[int]:
    """Per class, how often each of its train examples is repeated so that every class comes near
    the largest one's count: round(n_max / n_c), at least 1 (the largest class once)."""
    counts = class_counts(label_ids, labels, option)
    return [max(1, round(max(counts) / n)) for n in counts]


def parse_class_values(spec: str, labels: Sequence[str], option: str) -> List[float]:
    """Values in ``labels`` order from ``v1,v2,...`` (that order) or ``label=v,...`` (every label
    once); each finite and >= 0, not all 0. Anything else is a one-line error naming ``option``."""
    items = [item.strip() for item in spec.split(",") if item.strip()]
    named = ["=" in item for item in items]
    if any(named) and not all(named):
        raise BioConfigError(
            f"{option}: give every weight as label=weight, or none (numbers in task.labels order)"
        )
    if all(named):
        pairs = [item.rsplit("=", 1) for item in items]
        by_name = {name.strip(): value.strip() for name, value in pairs}
        problems = [f"unknown label {name!r}" for name in by_name if name not in labels]
        problems += [f"no weight for label {name!r}" for name in labels if name not in by_name]
        if len(by_name) != len(pairs):
            problems.append("a label named twice")
        if problems:
            raise BioConfigError(f"{option}: {problems[0]} (labels: {', '.join(labels)})")
        items = [by_name[name] for name in labels]
    elif len(items) != len(labels):
        raise BioConfigError(
            f"{option}: {len(items)} weights for {len(labels)} classes (task.labels order: {', '.join(labels)})"
        )
    try:
        values = [float(item) for item in items]
    except ValueError:
        raise BioConfigError(f"{option}: weights must be numbers") from None
    if not all(math.isfinite(v) and v >= 0 for v in values) or not any(values):
        raise BioConfigError(f"{option}: weights must be finite and >= 0, and not all 0")
    return values


def parse_oversampling(spec: str, labels: Sequence[str], option: str) -> List[int]:
    """Repetition factors in ``labels`` order, written as class weights are; each a whole number >=
    1 (every example is kept at least once: nothing given is dropped)."""
    values = parse_class_values(spec, labels, option)
    bad = [name for name, v in zip(labels, values) if v < 1 or v != int(v)]
    if bad:
        raise BioConfigError(
            f"{option}: class {bad[0]!r}: each factor must be a whole number >= 1 (how often its examples are used)"
        )
    return [int(v) for v in values]
