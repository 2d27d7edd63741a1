"""Summable statistics: a dataclass of sums that adds field by field.

Every metric here is computed from statistics that can be summed over batches, workers and files
(counts, sums of scores, sufficient statistics of Pearson's r) and turned into the score once at the
end; ``Sums`` gives each such dataclass its ``+`` (and ``sum()``), so the adding is written once.
"""

from dataclasses import fields


class Sums:
    """Mixin for a ``@dataclass`` whose fields are all sums: ``a + b`` adds them field by field;
    ``sum(items)`` works too (it starts from 0)."""

    def __add__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return type(self)(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def __radd__(self, other):
        if isinstance(other, int) and other == 0:
            return self
        return NotImplemented
