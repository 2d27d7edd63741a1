"""bio_electra: ELECTRA's loss, generator MLM cross-entropy + lambda x discriminator binary
cross-entropy."""

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from fairseq import metrics
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass

from ..errors import BioConfigError

# Summable counts each step logs; every rate is derived from them in reduce_metrics.
COUNTS = (
    "gen_loss_sum",
    "masked",
    "gen_correct",
    "disc_loss_sum",
    "tokens",
    "disc_correct",
    "replaced",
    "replaced_detected",
    "original",
    "original_correct",
    "predicted_replaced",
    "replaced_prob_sum",
    "original_prob_sum",
)


@dataclass
class BioElectraCriterionConfig(FairseqDataclass):
    discriminator_weight: float = field(
        default=50.0, metadata={"help": "lambda: weight of the discriminator loss (ELECTRA: 50)"}
    )
    temperature: float = field(
        default=1.0,
        metadata={"help": "temperature of the generator's softmax when sampling replacements"},
    )


@register_criterion("bio_electra", dataclass=BioElectraCriterionConfig)
class BioElectraCriterion(FairseqCriterion):
    """Mean generator cross-entropy over masked positions + ``discriminator_weight`` x mean
    discriminator binary cross-entropy over every non-pad token (ELECTRA's per-batch means, so
    ``sample_size`` is 1 per batch). Replacements are sampled from the generator (no gradient); a
    sample equal to the original token is labelled original; special symbols are never sampled.
    Losses are logged in base 2, like ``masked_lm``.
    """

    def __init__(self, task, discriminator_weight: float = 50.0, temperature: float = 1.0):
        super().__init__(task)
        if temperature <= 0:
            raise BioConfigError(f"criterion.temperature={temperature}: must be > 0")
        self.discriminator_weight = discriminator_weight
        self.temperature = temperature

    def forward(self, model, sample, reduce=True):
        original = sample["original_tokens"]
        masked = sample["target"].ne(self.padding_idx)
        generator = None
        if "sampling_seed" in sample:
            generator = torch.Generator(device=original.device)
            generator.manual_seed(sample["sampling_seed"])
        out = model(
            **sample["net_input"],
            original_tokens=original,
            masked_tokens=masked,
            temperature=self.temperature,
            generator=generator,
        )
        # Every count stays a tensor on the batch's device: reading one back (int(), float(), a
        # boolean mask) waits for a GPU, and fairseq reads the summed counts at its log interval
        # anyway.
        targets = out["generator_targets"]
        gen_logits = out["generator_logits"].float()
        gen_loss_sum = F.cross_entropy(gen_logits, targets, reduction="sum")
        tokens = original.ne(self.padding_idx)
        replaced = out["replaced"] & tokens
        disc_logits = out["discriminator_logits"].float()
        per_token = F.binary_cross_entropy_with_logits(
            disc_logits, replaced.float(), reduction="none"
        )
        disc_loss_sum = per_token.masked_fill(~tokens, 0.0).sum()
        n_masked, n_tokens = masked.sum(), tokens.sum()
        loss = gen_loss_sum / n_masked.clamp(
            min=1
        ) + self.discriminator_weight * disc_loss_sum / n_tokens.clamp(min=1)

        predicted = (out["discriminator_logits"] > 0) & tokens
        # The discriminator's probability of "replaced", summed per class: it separates the classes
        # (and shows learning) long before it crosses 0.5 on replaced tokens against a ~14 % prior.
        probs = torch.sigmoid(out["discriminator_logits"].detach().double())
        n_replaced = replaced.sum()
        logging_output = {
            "loss": loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": original.size(0),
            "sample_size": 1,
            "gen_loss_sum": gen_loss_sum.data,
            "masked": n_masked,
            "gen_correct": (gen_logits.argmax(-1) == targets).sum(),
            "disc_loss_sum": disc_loss_sum.data,
            "tokens": n_tokens,
            "disc_correct": ((predicted == replaced) & tokens).sum(),
            "replaced": n_replaced,
            "replaced_detected": (predicted & replaced).sum(),
            "original": n_tokens - n_replaced,
            "original_correct": (~predicted & ~replaced & tokens).sum(),
            "predicted_replaced": predicted.sum(),
            "replaced_prob_sum": (probs * replaced).sum(),
            "original_prob_sum": (probs * (tokens & ~replaced)).sum(),
        }
        return loss, 1, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        def total(
            key,
        ):  # tensors stay tensors: the meters sum them, and the values are read when logged
            return sum(log.get(key, 0) for log in logging_outputs)

        batches = total("sample_size")
        metrics.log_scalar("loss", total("loss") / max(batches, 1) / math.log(2), batches, round=3)
        for key in COUNTS:
            metrics.log_scalar("_" + key, total(key))

        def ratio(num, den, scale=1.0):
            def value(m):
                denominator = float(m["_" + den].sum)
                return (
                    round(scale * float(m["_" + num].sum) / denominator, 4)
                    if denominator > 0
                    else 0.0
                )

            return value

        def gen_ppl(m):
            return round(
                2
                ** (float(m["_gen_loss_sum"].sum) / max(float(m["_masked"].sum), 1) / math.log(2)),
                3,
            )

        metrics.log_derived("gen_loss", ratio("gen_loss_sum", "masked", 1 / math.log(2)))
        metrics.log_derived("gen_ppl", gen_ppl)
        metrics.log_derived("gen_acc", ratio("gen_correct", "masked"))
        metrics.log_derived("disc_loss", ratio("disc_loss_sum", "tokens", 1 / math.log(2)))
        metrics.log_derived("disc_acc", ratio("disc_correct", "tokens"))
        metrics.log_derived("replaced_recall", ratio("replaced_detected", "replaced"))
        metrics.log_derived("replaced_precision", ratio("replaced_detected", "predicted_replaced"))
        metrics.log_derived("original_acc", ratio("original_correct", "original"))
        metrics.log_derived("replaced_frac", ratio("replaced", "tokens"))
        metrics.log_derived("replaced_prob", ratio("replaced_prob_sum", "replaced"))
        metrics.log_derived("original_prob", ratio("original_prob_sum", "original"))

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
