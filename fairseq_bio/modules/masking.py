"""BERT/RoBERTa masking of a padded batch, optionally whole words at a time."""

from typing import Dict, Optional, Tuple

import torch

from ..data.word_boundaries import WordBoundaries, special_symbols


class BatchMasker:
    """Chooses ``mask_prob`` of the words (or tokens) of each row and corrupts them 80/10/10.

    Works on a whole ``B x T`` batch with tensor operations on the batch's device, so the rate can follow
    the update number (PubMedBERT's 5 % -> 25 % schedule) and the result depends only on the generator's
    seed. Control symbols (``<s>``, ``</s>``, ``<pad>``, ``<mask>``) are never chosen. With word
    boundaries, a chosen word is corrupted as a unit: every one of its tokens is predicted, and the
    mask/keep/random decision is taken once per word (as in fairseq's ``MaskTokensDataset``).
    """

    def __init__(
        self,
        dictionary,
        mask_idx: int,
        leave_unmasked_prob: float = 0.1,
        random_token_prob: float = 0.1,
        freq_weighted_replacement: bool = False,
        word_boundaries: Optional[WordBoundaries] = None,
    ):
        if not 0.0 <= leave_unmasked_prob + random_token_prob <= 1.0:
            raise ValueError("leave_unmasked_prob + random_token_prob must lie in [0, 1]")
        self.pad_idx = dictionary.pad()
        self.mask_idx = mask_idx
        self.leave_unmasked_prob = leave_unmasked_prob
        self.random_token_prob = random_token_prob
        self.word_boundaries = word_boundaries
        special = special_symbols(dictionary)
        special[mask_idx] = True
        self.maskable = ~special
        counts = torch.tensor(dictionary.count, dtype=torch.float)
        weights = counts if freq_weighted_replacement else torch.ones(len(dictionary))
        # Random replacements are ordinary symbols only: no <unk>, and (unlike fairseq's) never <mask> itself.
        drawable = self.maskable.clone()
        drawable[dictionary.unk()] = False
        self.replacement_weights = torch.where(drawable, weights, torch.zeros(()))
        if self.replacement_weights.sum() <= 0:
            raise ValueError("the dictionary has no ordinary symbol to draw random replacements from")
        self._tables: Dict[torch.device, Tuple[torch.Tensor, torch.Tensor]] = {}

    def tables(self, device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
        """(``V`` maskable flags, ``V`` replacement weights) on ``device``, copied there once and then reused."""
        # A copy per batch is a host-to-device transfer that synchronises with the GPU's stream every update.
        if device not in self._tables:
            self._tables[device] = (self.maskable.to(device), self.replacement_weights.to(device))
        return self._tables[device]

    def __call__(
        self, tokens: torch.Tensor, mask_prob: float, generator: torch.Generator
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """``B x T`` tokens -> (corrupted ``B x T`` input, ``B x T`` targets: original token where chosen,
        pad elsewhere)."""
        device = tokens.device
        maskable_symbols, replacement_weights = self.tables(device)
        maskable = maskable_symbols[tokens]
        if self.word_boundaries is not None:
            starts = self.word_boundaries.word_starts(tokens)
        else:
            starts = maskable
        positions = torch.arange(tokens.size(1), device=device).expand_as(tokens)
        # Each maskable token belongs to the word that starts at the latest start at or before it.
        word_start = torch.where(starts, positions, torch.zeros_like(positions)).cummax(dim=1).values

        # Choose round(mask_prob * words) words per row, rounding probabilistically (as fairseq does).
        rand = torch.rand(tokens.shape, device=device, generator=generator)
        num_words = starts.sum(dim=1)
        num_chosen = (mask_prob * num_words + torch.rand(num_words.shape, device=device, generator=generator)).long()
        scores = torch.where(starts, rand, torch.full_like(rand, 2.0))
        rank = scores.argsort(dim=1).argsort(dim=1)
        chosen = starts & (rank < num_chosen.unsqueeze(1))

        # One keep/random/mask decision per chosen word, drawn at its first token.
        decision = torch.rand(tokens.shape, device=device, generator=generator)
        keep = chosen & (decision < self.leave_unmasked_prob)
        randomize = chosen & ~keep & (decision < self.leave_unmasked_prob + self.random_token_prob)

        def spread(flags: torch.Tensor) -> torch.Tensor:
            return flags.gather(1, word_start) & maskable

        chosen, keep, randomize = spread(chosen), spread(keep), spread(randomize)
        targets = torch.where(chosen, tokens, torch.full_like(tokens, self.pad_idx))
        corrupted = torch.where(chosen & ~keep & ~randomize, torch.full_like(tokens, self.mask_idx), tokens)
        num_random = int(randomize.sum())
        if num_random:
            draws = torch.multinomial(replacement_weights, num_random, replacement=True, generator=generator)
            corrupted = corrupted.masked_scatter(randomize, draws)
        return corrupted, targets
