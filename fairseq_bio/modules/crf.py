"""A linear-chain CRF over per-token tag scores: negative log-likelihood and Viterbi decoding.

Optional label-scheme constraints (``bio_constraints``) forbid transitions such as ``O -> I-X``;
whether to use them is the tagging head's choice (PubMedBERT's Table 11 compares BIO and IO, where
IO constrains nothing).
"""

from typing import Optional, Sequence, Tuple

import torch
from torch import nn

# Added to the score of a forbidden transition/start instead of -inf: finite in fp16 too (max
# 65504), and a forbidden gold path gives a large but finite loss rather than inf/NaN gradients.
DISALLOWED = -1e4


class LinearChainCRF(nn.Module):
    """Linear-chain CRF with ``K`` tags and Viterbi decoding; ``transitions[i, j]`` scores tag i
    followed by tag j."""

    def __init__(self, num_tags: int, allowed: Optional[torch.Tensor] = None):
        super().__init__()
        if num_tags < 1:
            raise ValueError(f"num_tags must be >= 1, got {num_tags}")
        self.num_tags = num_tags
        self.transitions = nn.Parameter(torch.empty(num_tags, num_tags))
        self.start = nn.Parameter(torch.empty(num_tags))
        self.end = nn.Parameter(torch.empty(num_tags))
        # Constraints are derived from the label list, so they are not saved with the weights.
        self.register_buffer("allowed_start", None, persistent=False)
        self.register_buffer("allowed", None, persistent=False)
        self.reset_parameters()
        if allowed is not None:
            self.set_constraints(None, allowed)

    def reset_parameters(self) -> None:
        """Initialise transitions, start and end scores uniformly in [-0.1, 0.1]."""
        for p in (self.transitions, self.start, self.end):
            nn.init.uniform_(p, -0.1, 0.1)

    def set_constraints(
        self, allowed_start: Optional[torch.Tensor], allowed: Optional[torch.Tensor]
    ) -> None:
        """Forbid starts (``K`` bool) and transitions (``K x K`` bool, from i to j) that are False;
        None allows all."""
        k = self.num_tags
        for name, value, shape in (
            ("allowed_start", allowed_start, (k,)),
            ("allowed", allowed, (k, k)),
        ):
            if value is not None:
                if value.dtype != torch.bool or tuple(value.shape) != shape:
                    raise ValueError(
                        f"{name} must be a bool tensor of shape {shape}, got {value.dtype} {tuple(value.shape)}"
                    )
                value = value.to(self.transitions.device)
            setattr(self, name, value)

    def extra_repr(self) -> str:
        constrained = self.allowed is not None or self.allowed_start is not None
        return f"num_tags={self.num_tags}, constrained={constrained}"

    def forward(
        self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """Negative log-likelihood per sequence (B) of tags (B x T) given emissions (B x T x K) and
        mask (B x T)."""
        self._check(emissions, mask, tags)
        scores = self._scores(emissions)
        return self._log_partition(*scores, mask) - self._score(*scores, tags, mask)

    def log_partition(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """log Z per sequence (B) for emissions (B x T x K) and a left-aligned mask (B x T); 0 for
        empty rows."""
        self._check(emissions, mask)
        return self._log_partition(*self._scores(emissions), mask)

    @torch.no_grad()
    def decode(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Viterbi best tags (B x T long) for emissions (B x T x K); -1 where the mask (B x T) is
        False."""
        self._check(emissions, mask)
        batch, length, k = emissions.shape
        if length == 0:
            return torch.empty(batch, 0, dtype=torch.long, device=emissions.device)
        emissions, start, transitions, end = self._scores(emissions)
        score = start + emissions[:, 0]  # B x K: best score of a path ending in each tag
        identity = torch.arange(k, device=emissions.device).expand(batch, k)
        backpointers = []
        for t in range(1, length):
            # max over the previous tag (dim 1); torch.max returns the first maximal index
            # (documented), so ties go to the lowest previous tag, and the final argmax to the
            # lowest last tag.
            best, previous = (score.unsqueeze(2) + transitions).max(dim=1)
            step = mask[:, t].unsqueeze(1)
            score = torch.where(step, best + emissions[:, t], score)
            # Past a row's end the pointer is the identity, so backtracking carries its last tag
            # back unchanged.
            backpointers.append(torch.where(step, previous, identity))
        path = torch.empty(batch, length, dtype=torch.long, device=emissions.device)
        path[:, -1] = (score + end).argmax(dim=1)
        for t in range(length - 1, 0, -1):
            path[:, t - 1] = backpointers[t - 1].gather(1, path[:, t : t + 1]).squeeze(1)
        return path.masked_fill(~mask, -1)

    def _scores(self, emissions: torch.Tensor):
        """Emissions (B x T x K), start (K), transitions (K x K), end (K) in the compute dtype,
        constraints added."""
        # Half/bfloat16 inputs and parameters (fairseq --fp16 halves the whole model) are scored in
        # float32: sums over long sequences overflow or round in fp16. float64 stays float64, so
        # gradcheck works.
        dtype = torch.promote_types(
            torch.promote_types(emissions.dtype, self.transitions.dtype), torch.float32
        )
        start, transitions = self.start.to(dtype), self.transitions.to(dtype)
        if self.allowed_start is not None:
            start = start + DISALLOWED * (~self.allowed_start).to(dtype)
        if self.allowed is not None:
            transitions = transitions + DISALLOWED * (~self.allowed).to(dtype)
        return emissions.to(dtype), start, transitions, self.end.to(dtype)

    @staticmethod
    def _log_partition(emissions, start, transitions, end, mask) -> torch.Tensor:
        """Forward algorithm: log Z (B), 0 for empty rows."""
        if emissions.shape[1] == 0:
            return emissions.new_zeros(emissions.shape[0])
        alpha = start + emissions[:, 0]  # B x K: log-sum of all path scores ending in each tag
        for t in range(1, emissions.shape[1]):
            step = torch.logsumexp(alpha.unsqueeze(2) + transitions, dim=1) + emissions[:, t]
            alpha = torch.where(mask[:, t].unsqueeze(1), step, alpha)
        log_z = torch.logsumexp(alpha + end, dim=1)
        return torch.where(mask[:, 0], log_z, torch.zeros_like(log_z))

    @staticmethod
    def _score(emissions, start, transitions, end, tags, mask) -> torch.Tensor:
        """Score (B) of the tag paths (B x T) over the masked positions, 0 for empty rows."""
        batch, length, _ = emissions.shape
        if length == 0:
            return emissions.new_zeros(batch)
        tags = tags.masked_fill(
            ~mask, 0
        )  # masked-off tags may be -100/pad: any valid index will do
        zero = emissions.new_zeros(())
        emitted = torch.where(mask, emissions.gather(2, tags.unsqueeze(2)).squeeze(2), zero).sum(1)
        moved = torch.where(mask[:, 1:], transitions[tags[:, :-1], tags[:, 1:]], zero).sum(1)
        last = tags.gather(1, (mask.sum(1, keepdim=True) - 1).clamp(min=0)).squeeze(1)
        return torch.where(mask[:, 0], start[tags[:, 0]] + emitted + moved + end[last], zero)

    def _check(
        self, emissions: torch.Tensor, mask: torch.Tensor, tags: Optional[torch.Tensor] = None
    ) -> None:
        """One-line errors for shapes, a mask that is not left-aligned, and tags outside [0, K)
        where unmasked."""
        if emissions.dim() != 3 or emissions.shape[2] != self.num_tags:
            raise ValueError(
                f"emissions must be B x T x {self.num_tags}, got {tuple(emissions.shape)}"
            )
        if mask.dtype != torch.bool or mask.shape != emissions.shape[:2]:
            raise ValueError(
                f"mask must be a bool B x T tensor {tuple(emissions.shape[:2])}, got {mask.dtype} "
                f"{tuple(mask.shape)}"
            )
        if tags is not None and (tags.dtype != torch.long or tags.shape != mask.shape):
            raise ValueError(
                f"tags must be a long B x T tensor {tuple(mask.shape)}, got {tags.dtype} {tuple(tags.shape)}"
            )
        gaps = mask[:, 1:] & ~mask[:, :-1]
        bad_tags = (
            mask & ((tags < 0) | (tags >= self.num_tags))
            if tags is not None
            else torch.zeros_like(mask)
        )
        if gaps.any() | bad_tags.any():  # one host sync for both checks
            if gaps.any():
                row = int(gaps.any(1).nonzero()[0])
                raise ValueError(f"mask row {row} is not left-aligned (a True follows a False)")
            row, col = (int(i) for i in bad_tags.nonzero()[0])
            value, k = int(tags[row, col]), self.num_tags
            raise ValueError(
                f"tags[{row}, {col}] = {value} at an unmasked position is not a tag in [0, {k})"
            )


def _parse_label(index: int, label: str) -> Tuple[str, Optional[str]]:
    """(prefix, type) of a scheme label: ``O`` -> ("O", None), ``B-Disease`` -> ("B", "Disease")."""
    if label == "O":
        return "O", None
    prefix, sep, kind = label.partition("-")
    # BIOUL's L(ast)/U(nit) are BIOES's E(nd)/S(ingle).
    prefix = {"L": "E", "U": "S"}.get(prefix, prefix)
    if not sep or not kind or len(prefix) != 1 or prefix not in "BIES":
        raise ValueError(
            f"label {index} {label!r}: expected O or B-/I-/E-/S- (or L-/U-) followed by a type"
        )
    return prefix, kind


def bio_constraints(labels: Sequence[str]) -> Tuple[torch.Tensor, torch.Tensor]:
    """(allowed_start K bool, allowed K x K bool from i to j) for a BIO, BIOES/BIOUL or IO label
    list.

    BIO: ``I-X`` only after ``B-X``/``I-X``. BIOES: ``I-X``/``E-X`` only after ``B-X``/``I-X``, and
    ``B-X``/``I-X`` only before ``I-X``/``E-X``. Neither may start with ``I``/``E``. IO labels (no
    B/E/S) allow everything. Only transitions are constrained: a BIOES sequence may still end on
    ``B-X``/``I-X``. Optional: pass the result to ``LinearChainCRF.set_constraints`` if the head
    wants constrained training and decoding.
    """
    parsed = [_parse_label(i, label) for i, label in enumerate(labels)]
    k = len(parsed)
    allowed_start = torch.ones(k, dtype=torch.bool)
    allowed = torch.ones(k, k, dtype=torch.bool)
    prefixes = {prefix for prefix, _ in parsed}
    if not prefixes & set("BES"):
        return allowed_start, allowed  # IO: every I-X may follow anything
    bioes = bool(prefixes & set("ES"))
    inside = "IE" if bioes else "I"  # tags that continue a chunk
    for j, (to_prefix, to_kind) in enumerate(parsed):
        if to_prefix in inside:
            allowed_start[j] = False
        for i, (from_prefix, from_kind) in enumerate(parsed):
            if to_prefix in inside:
                allowed[i, j] = from_prefix in "BI" and from_kind == to_kind
            elif bioes and from_prefix in "BI":
                allowed[i, j] = False  # an open BIOES chunk must continue with I-X/E-X
    return allowed_start, allowed
