"""bio_extractive_qa criterion: cross-entropy of the start and of the end position of each window
(their mean, summed over windows; a window without the answer targets ``<s>``), over the context
positions and ``<s>`` only. In validation each question's n-best answers over all its windows are
scored against its gold answers as summable sums, from which ``reduce_metrics`` derives
percentages: SQuAD ``exact_match`` / ``f1`` (``HasAns_`` / ``NoAns_`` too for v2.0) and BioASQ
factoid ``strict_acc`` / ``lenient_acc`` / ``mrr``, any of them a
``checkpoint.best_checkpoint_metric`` (docs/fine-tuning.md, "Extractive QA")."""

import math
from dataclasses import dataclass

import torch.nn.functional as F
from fairseq import metrics
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass

from ..data.qa_dataset import best_answers, null_score_diffs, v2_predictions
from ..metrics.qa import factoid_sums, has_answer, squad_v2_sums

MASKED = (
    -1e4
)  # logit of the positions no answer can start or end at (finite: a row never becomes all -inf)
SUMS = ("qa_exact", "qa_f1", "qa_total", "fa_strict", "fa_lenient", "fa_rr", "fa_total")
V2_SUMS = (
    "qa_has_exact",
    "qa_has_f1",
    "qa_has_total",
)  # SQuAD v2.0: the questions that have an answer


@dataclass
class BioExtractiveQACriterionConfig(FairseqDataclass):
    pass


@register_criterion("bio_extractive_qa", dataclass=BioExtractiveQACriterionConfig)
class BioExtractiveQACriterion(FairseqCriterion):
    """Start/end cross-entropy per window; validation sums of SQuAD and BioASQ factoid scores per
    question."""

    def __init__(self, cfg: BioExtractiveQACriterionConfig, task):
        super().__init__(task)
        self.head_name = task.cfg.head_name

    def span_logits(self, model, sample):
        """(start, end) logits, each ``R x T`` float, with every position but the context pieces and
        ``<s>`` masked."""
        scores, _ = model(
            **sample["net_input"], features_only=True, classification_head_name=self.head_name
        )
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
            answers = self.answers(start_logits, end_logits, sample)
            predictions = self.predictions(answers, start_logits, end_logits, sample)[0]
            logging_output.update(self.score(answers, sample["gold"], predictions))
        return loss, rows, logging_output

    def answers(self, start_logits, end_logits, sample):
        """Per question of the batch, its ranked answers (``best_answers`` with the task's decoding
        options)."""
        cfg = self.task.cfg
        return best_answers(
            start_logits,
            end_logits,
            sample,
            cfg.n_best,
            cfg.max_answer_length,
            max(cfg.top_answers, 1),
        )

    def predictions(self, answers, start_logits, end_logits, sample):
        """SQuAD v2.0 (``task.version_2_with_negative``): (each question's answer, "" for no answer;
        its null score diff, ``null_score_diffs``); otherwise (None, Nones): the top answers are the
        SQuAD answers.
        """
        if not self.task.cfg.version_2_with_negative:
            return None, [None] * len(answers)
        diffs = null_score_diffs(answers, start_logits, end_logits, sample)
        return v2_predictions(answers, diffs, self.task.cfg.null_score_diff_threshold), diffs

    @staticmethod
    def score(answers, golds, answered=None):
        """Summable sums of the questions' ranked answers against their gold answer texts.
        ``answered``: the SQuAD v2.0 answers ("" for none; then the ``HasAns`` sums too, and factoid
        sums over those questions only); None: the top answers (v1.1).

        SQuAD scores the top answer (``metrics.qa.squad_v2_sums``); BioASQ factoid
        (``metrics.qa.factoid_sums``, the gold answers taken as synonyms) the top answer (strict),
        any of the top 5 (lenient) and the reciprocal rank of the first correct one among the top
        5."""
        v2 = answered is not None
        top = answered if v2 else [a[0]["text"] if a else "" for a in answers]
        squad, has = squad_v2_sums(top, golds)
        scored = [i for i, gold in enumerate(golds) if has_answer(gold) or not v2]
        factoid = factoid_sums(
            [[x["text"] for x in answers[i]] for i in scored], [golds[i] for i in scored]
        )
        sums = {
            "qa_exact": squad.exact,
            "qa_f1": squad.f1,
            "qa_total": squad.total,
            "fa_strict": factoid.strict,
            "fa_lenient": factoid.lenient,
            "fa_rr": factoid.reciprocal_rank,
            "fa_total": factoid.total,
        }
        if v2:
            sums.update(qa_has_exact=has.exact, qa_has_f1=has.f1, qa_has_total=has.total)
        return sums

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        def total(key):
            return sum(log.get(key, 0) for log in logging_outputs)

        sample_size = total("sample_size")
        metrics.log_scalar(
            "loss", total("loss") / max(sample_size, 1) / math.log(2), sample_size, round=3
        )
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
        if not any("qa_has_total" in log for log in logging_outputs):
            return
        for key in V2_SUMS:
            metrics.log_scalar_sum(key, total(key))

        def unanswerable(key):  # the questions without an answer: all of them less those with one
            def derive(m):
                count = m["qa_total"].sum - m["qa_has_total"].sum
                return round(100 * (m[f"qa_{key}"].sum - m[f"qa_has_{key}"].sum) / max(count, 1), 2)

            return derive

        metrics.log_derived("HasAns_exact", mean("qa_has_exact", "qa_has_total"))
        metrics.log_derived("HasAns_f1", mean("qa_has_f1", "qa_has_total"))
        metrics.log_derived("NoAns_exact", unanswerable("exact"))
        metrics.log_derived("NoAns_f1", unanswerable("f1"))

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
