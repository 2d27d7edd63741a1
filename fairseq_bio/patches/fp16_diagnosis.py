"""A diagnosis for fairseq's classic fp16 failure, "Minimum loss scale reached".

fairseq's dynamic loss scaler halves the loss scale at every fp16 gradient overflow and raises
``FloatingPointError("Minimum loss scale reached (0.0001). Your loss is probably exploding...")``
when the scale falls to ``common.min_loss_scale``. By then the run has skipped every update since
the overflows began, the message says nothing about how it got there, and the user sees a long
traceback.

``install()`` wraps ``DynamicLossScaler.check_overflow`` so that the error, a ``LossScaleError``,
carries one line with what happened — how many updates in a row overflowed, from which scale — and
the remedies, in the order to try them; the README's "fp16: minimum loss scale reached" section
explains each. It is still a ``FloatingPointError``, which fairseq's trainer catches to re-run the
step under its ``NanDetector`` before it re-raises it and the run stops, and a ``BioError``, so that
it ends the run as one line (``errors``). bf16 has no loss scale and never gets here. Idempotent.
"""

import functools

from ..errors import BioError

FP16_REMEDIES = (
    "lower optimization.lr or lengthen lr_scheduler.warmup_updates",
    "set optimization.clip_norm (e.g. 1.0)",
    "use precision=bf16 on A100/H100 (no loss scaling)",
    "for large post-LN models model.encoder_normalize_before=true",
    "resume from the last good checkpoint (checkpoint.restore_file=<checkpoint_N_M.pt>)",
)


class LossScaleError(BioError, FloatingPointError):
    """fp16 training reached fairseq's minimum loss scale; the message is the one-line
    ``diagnosis``."""


def diagnosis(min_loss_scale: float, start_scale: float, overflows: int, updates: int) -> str:
    """The one-line message for a scaler that reached ``min_loss_scale`` after ``overflows``
    overflows in a row."""
    return (
        f"fp16: minimum loss scale reached ({min_loss_scale:g}) after {overflows} gradient overflows in a row "
        f"(scale {start_scale:g} -> {min_loss_scale:g}, from optimizer step {updates}): the gradients are "
        "inf/nan at any scale, so the loss has diverged, it is not just large. Try: "
        + "; ".join(FP16_REMEDIES)
        + " (README: 'fp16: minimum loss scale reached'; fairseq's NanDetector output above names the first module "
        "with inf/nan)"
    )


def install() -> None:
    """Make fairseq's dynamic loss scaler explain a run that reached its minimum loss scale."""
    from fairseq.optim.dynamic_loss_scaler import DynamicLossScaler

    check = DynamicLossScaler.check_overflow
    if getattr(check, "fairseq_bio_diagnoses", False):
        return

    @functools.wraps(check)
    def check_overflow(self, grad_norm):
        overflow = grad_norm == float("inf") or grad_norm != grad_norm
        if not overflow:
            self._fairseq_bio_run = None
            return check(self, grad_norm)
        run = getattr(self, "_fairseq_bio_run", None)
        if run is None:  # the first overflow of a run of them: where it started
            run = self._fairseq_bio_run = {
                "scale": self.loss_scale,
                "updates": self._iter,
                "overflows": 0,
            }
        run["overflows"] += 1
        try:
            return check(self, grad_norm)
        except FloatingPointError:
            raise LossScaleError(
                diagnosis(self.min_loss_scale, run["scale"], run["overflows"], run["updates"])
            ) from None

    check_overflow.fairseq_bio_diagnoses = True
    DynamicLossScaler.check_overflow = check_overflow
