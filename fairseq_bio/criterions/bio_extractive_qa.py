"""bio_extractive_qa criterion: cross-entropy of the start and of the end position of each window (their mean, summed
over windows; a window without the answer targets ``<s>``), over the context positions and ``<s>`` only (question
pieces and padding masked out). In validation each question's n-best answers over all its windows are decoded
(``data.qa_dataset.best_answers``) and scored against its gold answers as summable sums, from which ``reduce_metrics``
derives, as percentages:

- ``exact_match`` / ``f1``: SQuAD v1.1 (top answer; ``metrics.qa.squad_sums``);
- ``strict_acc`` / ``lenient_acc`` / ``mrr``: BioASQ factoid (top answer; any of the top 5; mean reciprocal rank of
  the first correct one among the top 5; ``metrics.qa.factoid_sums``), the gold answers taken as synonyms.

``checkpoint.best_checkpoint_metric`` can be any of them (the shipped config selects on ``mrr``, BioASQ's factoid
ranking measure).
"""

import math
from dataclasses import dataclass

import torch.nn.functional as F
from fairseq import metrics
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass

from ..data.qa_dataset import best_answers
from ..metrics.qa import factoid_sums, squad_sums

MASKED = -1e4  # logit of the positions no answer can start or end at (finite: a row never becomes all -inf)
SUMS = ("qa_exact", "qa_f1", "qa_total", "fa_strict", "fa_lenient", "fa_rr", "fa_total")


@dataclass
class BioExtractiveQACriterionConfig(FairseqDataclass):
    pass


@register_criterion("bio_extractive_qa", dataclass=BioExtractiveQACriterionConfig)
class BioExtractiveQACriterion(FairseqCriterion):
    """Start/end cross-entropy per window; validation sums of SQuAD and BioASQ factoid scores per question."""

    def __init__(self, cfg: BioExtractiveQACriterionConfig, task):
        super().__init__(task)
        self.head_name = task.cfg.head_name

    def span_logits(self, model, sample):
        """(start, end) logits, each ``R x T`` float, with every position but the context pieces and ``<s>`` masked."""
        scores, _ = model(**sample["net_input"], features_only=True, classification_head_name=self.head_name)
        allowed = sample["span_mask"].clone()
        allowed[:, 0] = True
        scores = scores.float().masked_fill(~allowed.unsqueeze(-1), MASKED)
        return scores[..., 0], scores[..., 1]

    def forward(self, model, sample, reduce=True):
        start_logits, end_logits = self.span_logits(model, sample)
        rows = start_logits.size(0)
        if "start_positions" in sample:
            loss = (
                F.cross_entropy(start_logits, sample["start_positions"], reduction="sum")
                + F.cross_entropy(end_logits, sample["end_positions"], reduction="sum")
            ) / 2
        else:
            loss = start_logits.new_zeros(())
        logging_output = {
            "loss": loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["nsentences"],
            "sample_size": rows,
            "windows": rows,
        }
        if not model.training and sample["gold"][0] is not None:
            logging_output.update(self.score(self.answers(start_logits, end_logits, sample), sample["gold"]))
        return loss, rows, logging_output

    def answers(self, start_logits, end_logits, sample):
        """Per question of the batch, its ranked answers (``best_answers`` with the task's decoding options)."""
        cfg = self.task.cfg
        return best_answers(
            start_logits, end_logits, sample, cfg.n_best, cfg.max_answer_length, max(cfg.top_answers, 1)
        )

    @staticmethod
    def score(answers, golds):
        """Summable sums of the questions' ranked answers against their gold answer texts."""
        squad = squad_sums([a[0]["text"] if a else "" for a in answers], golds)
        factoid = factoid_sums([[x["text"] for x in a] for a in answers], golds)
        return {
            "qa_exact": squad.exact,
            "qa_f1": squad.f1,
            "qa_total": squad.total,
            "fa_strict": factoid.strict,
            "fa_lenient": factoid.lenient,
            "fa_rr": factoid.reciprocal_rank,
            "fa_total": factoid.total,
        }

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        def total(key):
            return sum(log.get(key, 0) for log in logging_outputs)

        sample_size = total("sample_size")
        metrics.log_scalar("loss", total("loss") / max(sample_size, 1) / math.log(2), sample_size, round=3)
        metrics.log_scalar_sum("windows", total("windows"))
        if not any("qa_total" in log for log in logging_outputs):
            return
        for key in SUMS:
            metrics.log_scalar_sum(key, total(key))

        def mean(key, count):
            return lambda m: round(100 * m[key].sum / max(m[count].sum, 1), 2)

        metrics.log_derived("exact_match", mean("qa_exact", "qa_total"))
        metrics.log_derived("f1", mean("qa_f1", "qa_total"))
        metrics.log_derived("strict_acc", mean("fa_strict", "fa_total"))
        metrics.log_derived("lenient_acc", mean("fa_lenient", "fa_total"))
        metrics.log_derived("mrr", mean("fa_rr", "fa_total"))

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
