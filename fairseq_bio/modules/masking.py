"""BERT/RoBERTa masking of a padded batch, optionally whole words at a time."""

from typing import Dict, Optional, Tuple

import torch

from ..data.word_boundaries import WordBoundaries, special_symbols

BUDGETS = ("words", "tokens")
DECISIONS = ("word", "token")


class BatchMasker:
    """Chooses ``mask_prob`` of each row to predict and corrupts the chosen tokens 80/10/10.

    Works on a whole ``B x T`` batch with tensor operations on the batch's device, so the rate can
    follow the update number (PubMedBERT's 5 % -> 25 % schedule) and the result depends only on the
    generator's seed. Control symbols (``<s>``, ``</s>``, ``<pad>``, ``<mask>``) are never chosen.
    With word boundaries, a chosen word is predicted as a unit: every one of its tokens.

    Two rules for how much is chosen (``budget``):

    - ``"words"``, fairseq's ``MaskTokensDataset``: ``mask_prob`` of the row's words (tokens,
      without word boundaries), rounded probabilistically; with whole words, ``mask_prob`` of the
      tokens on average, but a row predicts as many tokens as the words it drew have.
    - ``"tokens"``, BERT's ``create_pretraining_data.py`` (and Megatron-LM's and ELECTRA's masking):
      a budget of ``max(1, round(mask_prob x non-pad tokens))`` tokens, specials counted as BERT
      counts ``[CLS]``/``[SEP]``; whole words in a random order are taken while they fit, a word
      that would overrun the budget is skipped.

    The mask/keep/random decision is taken once per chosen word (``decision="word"``, fairseq's) or
    once per token (``"token"``, BERT's); without word boundaries the two are the same.
    """

    def __init__(
        self,
        dictionary,
        mask_idx: int,
        leave_unmasked_prob: float = 0.1,
        random_token_prob: float = 0.1,
        freq_weighted_replacement: bool = False,
        word_boundaries: Optional[WordBoundaries] = None,
        budget: str = "words",
        decision: str = "word",
    ):
        if not 0.0 <= leave_unmasked_prob + random_token_prob <= 1.0:
            raise ValueError("leave_unmasked_prob + random_token_prob must lie in [0, 1]")
        if budget not in BUDGETS or decision not in DECISIONS:
            raise ValueError(f"budget must be one of {BUDGETS} and decision one of {DECISIONS}")
        self.pad_idx = dictionary.pad()
        self.mask_idx = mask_idx
        self.leave_unmasked_prob = leave_unmasked_prob
        self.random_token_prob = random_token_prob
        self.word_boundaries = word_boundaries
        self.budget = budget
        self.decision = decision
        special = special_symbols(dictionary)
        special[mask_idx] = True
        self.maskable = ~special
        counts = torch.tensor(dictionary.count, dtype=torch.float)
        weights = counts if freq_weighted_replacement else torch.ones(len(dictionary))
        # Random replacements are ordinary symbols only: no <unk>, and (unlike fairseq's) never
        # <mask> itself.
        drawable = self.maskable.clone()
        drawable[dictionary.unk()] = False
        self.replacement_weights = torch.where(drawable, weights, torch.zeros(()))
        if self.replacement_weights.sum() <= 0:
            raise ValueError(
                "the dictionary has no ordinary symbol to draw random replacements from"
            )
        self._tables: Dict[torch.device, Tuple[torch.Tensor, torch.Tensor]] = {}

    def tables(self, device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
        """(``V`` maskable flags, ``V`` replacement weights) on ``device``, copied there once and
        then reused."""
        # A copy per batch is a host-to-device transfer that synchronises with the GPU's stream
        # every update.
        if device not in self._tables:
            self._tables[device] = (self.maskable.to(device), self.replacement_weights.to(device))
        return self._tables[device]

    def __call__(
        self, tokens: torch.Tensor, mask_prob: float, generator: torch.Generator
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """``B x T`` tokens -> (corrupted ``B x T`` input, ``B x T`` targets: original token where
        chosen, pad elsewhere)."""
        device = tokens.device
        maskable_symbols, replacement_weights = self.tables(device)
        maskable = maskable_symbols[tokens]
        if self.word_boundaries is not None:
            starts = self.word_boundaries.word_starts(tokens)
        else:
            starts = maskable
        positions = torch.arange(tokens.size(1), device=device).expand_as(tokens)
        # Each maskable token belongs to the word that starts at the latest start at or before it.
        word_start = (
            torch.where(starts, positions, torch.zeros_like(positions)).cummax(dim=1).values
        )

        rand = torch.rand(tokens.shape, device=device, generator=generator)
        if self.budget == "words":
            # Choose round(mask_prob * words) words per row, rounding probabilistically (as fairseq
            # does).
            num_words = starts.sum(dim=1)
            fraction = torch.rand(num_words.shape, device=device, generator=generator)
            num_chosen = (mask_prob * num_words + fraction).long()
            scores = torch.where(starts, rand, torch.full_like(rand, 2.0))
            rank = scores.argsort(dim=1).argsort(dim=1)
            chosen = starts & (rank < num_chosen.unsqueeze(1))
        else:
            budget = (mask_prob * tokens.ne(self.pad_idx).sum(dim=1)).round().clamp_min(1).long()
            lengths = torch.zeros_like(tokens).scatter_add_(1, word_start, maskable.long())
            chosen = _fill_token_budget(starts, lengths, rand, budget)

        # One keep/random/mask decision per chosen word (drawn at its first token), or one per
        # token.
        decision = torch.rand(tokens.shape, device=device, generator=generator)
        if self.decision == "word":
            decision = decision.gather(1, word_start)
        chosen = chosen.gather(1, word_start) & maskable
        keep = chosen & (decision < self.leave_unmasked_prob)
        randomize = chosen & ~keep & (decision < self.leave_unmasked_prob + self.random_token_prob)

        targets = torch.where(chosen, tokens, torch.full_like(tokens, self.pad_idx))
        corrupted = torch.where(
            chosen & ~keep & ~randomize, torch.full_like(tokens, self.mask_idx), tokens
        )
        if self.random_token_prob > 0:
            # As many draws as positions, the k-th randomised position (row-major) taking draw k:
            # the draws of counting the randomised positions first (a prefix of these), without
            # reading that count back to the host, which on a GPU waits for the device every update.
            draws = torch.multinomial(
                replacement_weights, tokens.numel(), replacement=True, generator=generator
            )
            rank = (randomize.flatten().cumsum(0) - 1).clamp_(min=0)
            corrupted = torch.where(randomize, draws[rank].view_as(tokens), corrupted)
        return corrupted, targets


def flat_positions(mask: torch.Tensor) -> torch.Tensor:
    """``B x T`` bool -> the flat row-major indices of its true positions (``N``): the one host read
    a masked-LM step needs (their number sizes the LM head's matmul). Taken before the forward pass
    is queued, the host waits on a GPU for the masking only; ``take_positions`` then selects with
    these indices without reading anything back, where a boolean mask reads its count again at every
    use."""
    return mask.flatten().nonzero().squeeze(1)


def take_positions(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """``B x T x ...`` -> ``N x ...`` at ``positions``: a ``B x T`` bool mask (fairseq's way, a host
    read) or ``N`` indices from ``flat_positions`` (the same rows in the same order, no read)."""
    if positions.dtype == torch.bool:
        return x[positions]
    return x.flatten(0, 1)[positions]


def _fill_token_budget(
    starts: torch.Tensor, lengths: torch.Tensor, rand: torch.Tensor, budget: torch.Tensor
) -> torch.Tensor:
    """BERT's whole-word choice for ``B x T`` word-start flags, ``B x T`` word lengths in tokens (at
    the starts), ``B x T`` uniform scores giving the words' random order, and ``B`` token budgets ->
    ``B x T`` chosen starts.

    In that order, a word is taken when it fits in what is left of the budget and skipped otherwise.
    Up to the first word that does not fit this is a running sum; after it, what is left is shorter
    than that word, and each further pass takes the next word that fits in every row at once, so the
    passes are fewer than the longest word's tokens."""
    order = torch.where(starts, rand, torch.full_like(rand, 2.0)).argsort(
        dim=1
    )  # the words first, shuffled
    too_long = lengths.new_tensor(lengths.size(1) + 1)
    length = torch.where(starts, lengths, too_long).gather(1, order)  # non-words never fit
    taken = length.cumsum(dim=1) <= budget.unsqueeze(1)  # a prefix of each row
    left = budget - (length * taken).sum(dim=1)
    last = taken.sum(dim=1)  # the first word that did not fit (skipped)
    index = torch.arange(length.size(1), device=length.device).expand_as(length)
    while True:
        fits = (index > last.unsqueeze(1)) & (length <= left.unsqueeze(1))
        found = fits.any(dim=1)
        if not bool(found.any()):
            break
        nxt = fits.int().argmax(dim=1)  # the first that fits
        taken |= (index == nxt.unsqueeze(1)) & found.unsqueeze(1)
        left = left - torch.where(
            found, length.gather(1, nxt.unsqueeze(1)).squeeze(1), torch.zeros_like(left)
        )
        last = torch.where(found, nxt, last)
    return torch.zeros_like(starts).scatter(1, order, taken)
