"""Summable metric statistics add field by field (fairseq_bio.metrics.sums), for every such
dataclass."""

import math

import pytest

from fairseq_bio.metrics.classification import AccuracyCounts, ExampleSums
from fairseq_bio.metrics.qa import FactoidSums, SquadSums
from fairseq_bio.metrics.similarity import PearsonSums, pearson_sums
from fairseq_bio.metrics.tagging import SpanCounts


@pytest.mark.parametrize(
    "cls", [AccuracyCounts, ExampleSums, FactoidSums, SquadSums, PearsonSums, SpanCounts]
)
def test_sums_add_field_by_field(cls):
    from dataclasses import astuple, fields

    a = cls(*range(1, len(fields(cls)) + 1))
    b = cls(*(10 * i for i in range(1, len(fields(cls)) + 1)))
    assert astuple(a + b) == tuple(11 * i for i in range(1, len(fields(cls)) + 1))
    assert sum([a, b, a]) == a + b + a and sum([], cls()) == cls()
    with pytest.raises(TypeError):
        a + 1


def test_pearson_of_summed_parts_equals_the_whole():
    x, y = [1.0, 2.0, 3.5, 4.0, 7.0], [2.0, 1.0, 4.0, 3.0, 8.0]
    whole = pearson_sums(x, y).value()
    parts = pearson_sums(x[:2], y[:2]) + pearson_sums(x[2:], y[2:])
    assert math.isclose(parts.value(), whole) and math.isclose(
        sum([pearson_sums(x, y)]).value(), whole
    )
