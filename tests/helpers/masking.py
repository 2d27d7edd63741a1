"""BatchMasker's inputs in tests: a WordPiece-like synthetic vocabulary with its word boundaries,
and blocks of random rows over it (a sentence boundary inside, half of them padded)."""

import torch
from helpers.small_models import make_dictionary

from fairseq_bio.data.word_boundaries import WordBoundaries

# A WordPiece-like vocabulary: "##" pieces continue the previous word.
SYMBOLS = [f"w{i}" for i in range(50)] + [f"##p{i}" for i in range(50)]


def wordpiece_setup():
    d, mask = make_dictionary(SYMBOLS)
    boundaries = WordBoundaries.from_bpe(d, {"_name": "bert"})
    return d, mask, boundaries


def random_rows(d, rows=64, length=60, seed=0):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(d.nspecial, d.nspecial + len(SYMBOLS), (rows, length), generator=g)
    tokens[:, 0] = d.bos()
    tokens[:, -1] = d.eos()
    tokens[:, 30] = d.eos()  # a sentence boundary inside the block
    tokens[: rows // 2, -8:] = d.pad()
    return tokens
