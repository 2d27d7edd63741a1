"""Knowledge-distillation loss terms as pure functions (no fairseq): the equations of bio-lm sec. 7
(seed 000) and Rohanian et al. 2022 sec. 4 (seed 004, eq. 1-11).

Every term is a mean over the positions it is defined on, and padding never counts: ``mask``
(``B x T``, or any leading shape of the inputs) is True at the positions that take part (masked
tokens, or every non-pad token). Hidden states are ``B x T x C``; attention maps ``B x H x T x T``
(query rows, key columns) with ``mask`` the non-pad tokens, so pad queries and pad keys both drop
out. Teacher tensors are targets: call these under ``torch.no_grad()`` for the teacher's forward, or
pass detached tensors.
"""

from typing import Callable, List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

Projection = Optional[Callable[[Tensor], Tensor]]


def _select(x: Tensor, mask: Optional[Tensor]) -> Tensor:
    """``... x C`` -> ``N x C``: the rows where ``mask`` (shape ``...``) is True, or all rows."""
    if mask is None:
        return x.reshape(-1, x.size(-1))
    if mask.shape != x.shape[:-1]:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not match states of shape {tuple(x.shape)}"
        )
    return x[mask]


def _mean(total: Tensor, count) -> Tensor:
    """``total / count``; no position to average over (e.g. a batch without a masked token)
    contributes nothing, not NaN. ``count``: an int, or a tensor on the device (reading it back
    would wait for a GPU), where the total over no position is 0 anyway."""
    if torch.is_tensor(count):
        return total / count.clamp(min=1)
    return total / count if count > 0 else total * 0.0


def _masked_mean(values: Tensor, mask: Optional[Tensor], per_position: int = 1) -> Tensor:
    """Mean of ``values`` (shape ``...``) over the positions where ``mask`` is True, each standing
    for ``per_position`` elements. Multiplying by the mask instead of indexing with it: boolean
    indexing of B x T x C states and B x H x T x T maps (nonzero + gather, and a scatter backwards)
    was most of these terms' cost.
    """
    if mask is None:
        return values.sum() / (values.numel() * per_position)
    if mask.shape != values.shape[-mask.dim() :]:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not match values of shape {tuple(values.shape)}"
        )
    weight = mask.to(values.dtype)
    return _mean(
        (values * weight).sum(), mask.sum() * ((values.numel() // mask.numel()) * per_position)
    )


def mlm_loss(logits: Tensor, target: Tensor, padding_idx: int) -> Tensor:
    """Mean cross-entropy of ``... x V`` logits against ``...`` targets, over targets that are not
    padding (eq. 1: the masked positions, the task puts padding everywhere else)."""
    flat = logits.reshape(-1, logits.size(-1)).float()
    total = F.cross_entropy(flat, target.reshape(-1), ignore_index=padding_idx, reduction="sum")
    return _mean(total, target.ne(padding_idx).sum())


def kl_loss(
    student_logits: Tensor,
    teacher_logits: Tensor,
    temperature: float = 1.0,
    mask: Optional[Tensor] = None,
):
    """T^2 x mean over positions of KL(softmax(t / T) || softmax(s / T)) of ``... x V`` logits (eq.
    2 with Hinton's temperature; T^2 keeps the gradient's scale independent of T)."""
    if temperature <= 0:
        raise ValueError(f"temperature={temperature}: must be > 0")
    s = _select(student_logits, mask).float()
    t = _select(teacher_logits, mask).detach().float()
    if s.shape != t.shape:
        raise ValueError(
            f"student logits {tuple(s.shape)} and teacher logits {tuple(t.shape)} differ in shape"
        )
    if (
        temperature != 1.0
    ):  # N x V passes are most of this term's cost: skip the ones T = 1 does not need
        s, t = s / temperature, t / temperature
    log_t = F.log_softmax(t, dim=-1)
    kl = (log_t.exp() * (log_t - F.log_softmax(s, dim=-1))).sum()
    return _mean(kl, s.size(0)) * temperature**2


def _projected(student: Tensor, teacher: Tensor, projection: Projection, what: str) -> Tensor:
    if projection is not None:
        student = projection(student)
    if student.size(-1) != teacher.size(-1):
        raise ValueError(
            f"{what}: student width {student.size(-1)} != teacher width {teacher.size(-1)} and no projection given"
        )
    return student


def cosine_loss(
    student: Tensor, teacher: Tensor, mask: Optional[Tensor] = None, projection: Projection = None
):
    """Mean over positions of 1 - cos(h_s W, h_t) for ``... x C`` states (eq. 3, eq. 10's hidden
    term; bio-lm's learned projection W when the widths differ)."""
    s = _projected(student, teacher, projection, "cosine alignment").float()
    return _masked_mean(1.0 - F.cosine_similarity(s, teacher.float(), dim=-1), mask)


def hidden_mse(
    student: Tensor, teacher: Tensor, mask: Optional[Tensor] = None, projection: Projection = None
):
    """MSE(h_s W, h_t) over positions and the teacher's channels for ``... x C`` states (eq. 6's
    hidden term, eq. 7 for the embeddings)."""
    s = _projected(student, teacher, projection, "hidden-state MSE").float()
    squares = F.mse_loss(s, teacher.float(), reduction="none").sum(-1)
    return _masked_mean(squares, mask, per_position=s.size(-1))


def _check_maps(student: Tensor, teacher: Tensor, mask: Optional[Tensor]) -> None:
    if student.shape != teacher.shape:
        raise ValueError(
            f"attention maps differ in shape: student {tuple(student.shape)}, teacher {tuple(teacher.shape)} "
            "(B x heads x T x T: student and teacher need the same number of heads)"
        )
    if mask is not None and (mask.dim() != 2 or mask.shape != (student.size(0), student.size(-1))):
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not match attention maps {tuple(student.shape)}"
        )


def attention_mse(student: Tensor, teacher: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    """1/H sum over heads of MSE(a_s^h, a_t^h) for ``B x H x T x T`` maps, over (query, key) pairs
    of non-pad tokens (eq. 6's attention term)."""
    _check_maps(student, teacher, mask)
    squares = (student.float() - teacher.float()) ** 2  # B x H x T x T
    if mask is None:
        return squares.mean()
    pairs = mask[:, :, None] & mask[:, None, :]  # B x T x T
    return _masked_mean(squares.transpose(0, 1), pairs)  # H x B x T x T: pairs broadcast over heads


def attention_kl(student: Tensor, teacher: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    """1/(H N) sum over heads and non-pad query rows of KL(a_t || a_s) for ``B x H x T x T`` maps
    (eq. 10's attention term; the teacher is the target, as in eq. 2 and CompactBioBERT's code)."""
    _check_maps(student, teacher, mask)
    s, t = student.float(), teacher.float()
    # A pad key has probability 0 in both maps: 0 log 0 = 0. The floor only guards log(0) of an
    # underflowed student probability; t = 0 there makes the product 0 either way.
    log_s = s.clamp_min(torch.finfo(s.dtype).tiny).log()
    rows = (torch.xlogy(t, t) - t * log_s).sum(-1)  # B x H x T
    return _masked_mean(
        rows.transpose(0, 1), mask
    )  # H x B x T: the query mask broadcast over heads


def uniform_layer_map(student_layers: int, teacher_layers: int) -> List[int]:
    """g(l) = l x N / M for student layers l = 1..M of an N-layer teacher (TinyBERT's uniform map;
    layer 0 is the embeddings), as 1-based teacher layers."""
    if student_layers < 1 or teacher_layers < 1:
        raise ValueError(f"layer map: {student_layers} student and {teacher_layers} teacher layers")
    if teacher_layers % student_layers:
        raise ValueError(
            f"layer map: a {teacher_layers}-layer teacher has no uniform map onto {student_layers} student layers "
            "(the number of teacher layers must be a multiple); give the teacher layers explicitly"
        )
    step = teacher_layers // student_layers
    return [step * layer for layer in range(1, student_layers + 1)]


def parse_layer_map(text: str, student_layers: int, teacher_layers: int) -> List[int]:
    """``"2,4,6"`` -> teacher layers (1-based) for student layers 1..M; empty -> the uniform map."""
    if not text.strip():
        return uniform_layer_map(student_layers, teacher_layers)
    try:
        layers = [int(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(
            f'layer map "{text}": not a comma-separated list of teacher layers'
        ) from None
    if len(layers) != student_layers:
        raise ValueError(
            f'layer map "{text}": {len(layers)} entries for {student_layers} student layers'
        )
    bad = [x for x in layers if not 1 <= x <= teacher_layers]
    if bad:
        raise ValueError(
            f'layer map "{text}": teacher layer {bad[0]} is not in 1..{teacher_layers}'
        )
    return layers
