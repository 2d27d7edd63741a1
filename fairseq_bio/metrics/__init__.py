"""Pure scoring functions (no fairseq import): entity P/R/F1 with conlleval semantics, word-level
macro F1."""

from .tagging import (
    SpanCounts,
    get_entities,
    prf,
    span_counts,
    span_counts_by_type,
    span_prf,
    span_report,
    token_counts,
    token_macro_f1,
)

__all__ = [
    "SpanCounts",
    "get_entities",
    "prf",
    "span_counts",
    "span_counts_by_type",
    "span_prf",
    "span_report",
    "token_counts",
    "token_macro_f1",
]
