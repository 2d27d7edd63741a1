"""BatchMasker on synthetic vocabularies: rates, 80/10/10, control symbols, whole words,
determinism. (Whole-word masking with the real tokenizers on real PubMed text:
test_whole_word_masking.py.)"""

import torch
from helpers.masking import SYMBOLS, random_rows, wordpiece_setup
from helpers.small_models import make_dictionary

from fairseq_bio.data.word_boundaries import WordBoundaries
from fairseq_bio.modules.masking import BatchMasker


def run(masker, tokens, rate=0.15, seed=3):
    return masker(tokens, rate, torch.Generator().manual_seed(seed))


def test_token_level_rate_and_80_10_10():
    d, mask, _ = wordpiece_setup()
    masker = BatchMasker(d, mask)
    tokens = random_rows(d, rows=400)
    corrupted, targets = run(masker, tokens)
    chosen = targets.ne(d.pad())
    ordinary = tokens.ge(d.nspecial)
    assert abs(chosen.sum().item() / ordinary.sum().item() - 0.15) < 0.01
    assert torch.equal(targets[chosen], tokens[chosen])
    as_mask = corrupted[chosen].eq(mask).float().mean().item()
    kept = corrupted[chosen].eq(tokens[chosen]).float().mean().item()
    assert abs(as_mask - 0.8) < 0.03 and 0.07 < kept < 0.13 + 1 / len(SYMBOLS)
    assert torch.equal(corrupted[~chosen], tokens[~chosen])


def test_control_symbols_are_never_chosen_or_drawn():
    d, mask, _ = wordpiece_setup()
    masker = BatchMasker(d, mask, leave_unmasked_prob=0.0, random_token_prob=1.0)
    tokens = random_rows(d)
    corrupted, targets = run(masker, tokens, rate=0.5)
    special = tokens.lt(d.nspecial)
    assert targets[special].eq(d.pad()).all()
    chosen = targets.ne(d.pad())
    assert corrupted[chosen].ge(d.nspecial).all() and corrupted[chosen].ne(mask).all()


def test_whole_words_are_chosen_together():
    d, mask, boundaries = wordpiece_setup()
    masker = BatchMasker(d, mask, word_boundaries=boundaries)
    tokens = random_rows(d, rows=200)
    corrupted, targets = run(masker, tokens)
    chosen = targets.ne(d.pad())
    word_ids = boundaries.word_ids(tokens)
    for row in range(tokens.size(0)):
        for w in word_ids[row].unique():
            if w == 0:
                continue
            in_word = word_ids[row].eq(w)
            flags = chosen[row][in_word]
            assert flags.all() or not flags.any()
            if flags.all():  # one decision per word: all <mask>, or none
                masked = corrupted[row][in_word].eq(mask)
                assert masked.all() or not masked.any()
    # The rate is over words, not tokens.
    starts = boundaries.word_starts(tokens)
    assert abs((chosen & starts).sum().item() / starts.sum().item() - 0.15) < 0.01


def test_same_seed_same_masks_other_seed_other_masks():
    d, mask, boundaries = wordpiece_setup()
    masker = BatchMasker(d, mask, word_boundaries=boundaries)
    tokens = random_rows(d)
    a, b, c = run(masker, tokens, seed=5), run(masker, tokens, seed=5), run(masker, tokens, seed=6)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[1], c[1])


def test_subword_nmt_continuation_marks_the_previous_token():
    d, mask = make_dictionary(["hyper@@", "tension", "the", "renal@@", "cell@@", "s"])
    boundaries = WordBoundaries.from_bpe(d, {"_name": "subword_nmt"})
    tokens = torch.tensor(
        [
            [d.bos()]
            + [d.index(s) for s in ["the", "hyper@@", "tension", "renal@@", "cell@@", "s"]]
            + [d.eos()]
        ]
    )
    assert boundaries.word_starts(tokens).tolist() == [
        [False, True, True, False, True, False, False, False]
    ]
    assert boundaries.word_ids(tokens).tolist() == [[0, 1, 2, 2, 3, 3, 3, 0]]
