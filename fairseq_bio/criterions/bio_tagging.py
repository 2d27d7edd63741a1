"""bio_tagging criterion: token cross-entropy (or CRF likelihood) at labelled positions; in
validation, summable entity and word counts from which corpus-level P/R/F1 are derived
(``checkpoint.best_checkpoint_metric=f1``)."""

import math
from dataclasses import dataclass

import torch
from fairseq import metrics
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass

from ..data.tag_schemes import convert_tags
from ..data.tagging_dataset import IGNORE, word_predictions
from ..metrics.tagging import element_types, prf, span_counts, token_counts

SPAN_KEYS = ("span_gold", "span_pred", "span_correct")


@dataclass
class BioTaggingCriterionConfig(FairseqDataclass):
    pass


@register_criterion("bio_tagging", dataclass=BioTaggingCriterionConfig)
class BioTaggingCriterion(FairseqCriterion):
    """Loss over labelled positions; validation counts of entity spans (conlleval) and of words per
    entity type."""

    def __init__(self, cfg: BioTaggingCriterionConfig, task):
        super().__init__(task)
        self.head_name = task.cfg.head_name

    def forward(self, model, sample, reduce=True):
        scores, _ = model(
            **sample["net_input"], features_only=True, classification_head_name=self.head_name
        )
        head = model.classification_heads[self.head_name]
        target = sample.get("target")
        labelled = 0 if target is None else int(target.ne(IGNORE).sum())
        loss = head.loss(scores, target, IGNORE) if target is not None else scores.new_zeros(())
        sample_size = max(labelled, 1)
        logging_output = {
            "loss": loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["nsentences"],
            "sample_size": sample_size,
        }
        if not model.training and sample["gold"][0] is not None:
            logging_output.update(self.score(head, scores, sample))
        return loss, sample_size, logging_output

    def score(self, head, scores, sample):
        """Summable counts of the batch: entity spans (gold/pred/correct), words (correct/total),
        and words of each entity type (for word-level macro F1)."""
        with torch.no_grad():
            predicted = head.predict(scores, sample["positions"])
        words = word_predictions(sample, predicted)
        pred_tags = [self.task.predictions_to_tags(w) for w in words]
        gold_tags = [convert_tags(g, "bio") for g in sample["gold"]]
        spans = span_counts(gold_tags, pred_tags)
        out = {"span_gold": spans.gold, "span_pred": spans.pred, "span_correct": spans.correct}
        out["word_correct"] = sum(
            p == g for ps, gs in zip(pred_tags, gold_tags) for p, g in zip(ps, gs)
        )
        out["word_total"] = sum(len(g) for g in gold_tags)
        per_type = token_counts(gold_tags, pred_tags)
        for t in element_types(self.task.types):
            counts = per_type.get(t)
            out[f"wgold_{t}"] = counts.gold if counts else 0
            out[f"wpred_{t}"] = counts.pred if counts else 0
            out[f"wcorrect_{t}"] = counts.correct if counts else 0
        return out

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        def total(key):
            return sum(log.get(key, 0) for log in logging_outputs)

        sample_size = total("sample_size")
        metrics.log_scalar("loss", total("loss") / sample_size / math.log(2), sample_size, round=3)
        if not any("span_gold" in log for log in logging_outputs):
            return
        for key in SPAN_KEYS + ("word_correct", "word_total"):
            metrics.log_scalar_sum(key, total(key))
        types = sorted(
            {k[len("wgold_") :] for log in logging_outputs for k in log if k.startswith("wgold_")}
        )
        for t in types:
            for kind in ("wgold", "wpred", "wcorrect"):
                metrics.log_scalar_sum(f"{kind}_{t}", total(f"{kind}_{t}"))

        def span(i):
            return lambda m: round(
                100 * prf(m["span_correct"].sum, m["span_pred"].sum, m["span_gold"].sum)[i], 2
            )

        metrics.log_derived("precision", span(0))
        metrics.log_derived("recall", span(1))
        metrics.log_derived("f1", span(2))
        metrics.log_derived(
            "accuracy",
            lambda m: round(100 * m["word_correct"].sum / max(m["word_total"].sum, 1), 2),
        )
        if types:

            def macro(m):
                f1s = [
                    prf(m[f"wcorrect_{t}"].sum, m[f"wpred_{t}"].sum, m[f"wgold_{t}"].sum)[2]
                    for t in types
                ]
                return round(100 * sum(f1s) / len(f1s), 2)

            metrics.log_derived("word_macro_f1", macro)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
