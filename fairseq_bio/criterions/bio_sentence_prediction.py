"""bio_sentence_prediction criterion: cross-entropy (classification, optionally class-weighted),
binary cross-entropy per label (multi-label) or squared error (regression) on each example's
window-pooled head output.

In validation it logs summable statistics from which ``reduce_metrics`` derives corpus-level
percentages (accuracy, macro F1 and positive-class micro F1; HoC's pooled and example-based F1;
Pearson), so ``checkpoint.best_checkpoint_metric`` selects on the whole dev set
(docs/fine-tuning.md, "Sentence-level tasks")."""

import logging
import math
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn.functional as F
from fairseq import metrics
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass

from ..data.class_balance import BALANCED, balanced_class_weights, parse_class_values
from ..data.sentence_windows import pool_windows
from ..errors import BioConfigError
from ..metrics.classification import (
    ExampleSums,
    class_counts,
    example_based_sums,
    from_log_fields,
    group_by_document,
    hoc_prf_from,
    log_fields,
    macro_f1_from,
    multilabel_counts,
    positive_counts,
)
from ..metrics.similarity import PearsonSums, pearson_sums
from ..metrics.tagging import SpanCounts
from ..modules.entity_head import entity_start_positions

logger = logging.getLogger(__name__)

CLASS, POSITIVE, LABEL, PEARSON, EXAMPLE = "cls_", "pos_", "ml_", "ps_", "ex_"


@dataclass
class BioSentencePredictionCriterionConfig(FairseqDataclass):
    class_weights: str = field(
        default="",
        metadata={
            "help": "task.kind=classification: per-class weights of the cross-entropy (BioMegatron's weighted "
            "cross-entropy for imbalanced RE): 'balanced' (n / (n_classes x n_c) from the train split's labels), "
            "comma-separated numbers in task.labels order, or label=weight for every label; empty: unweighted"
        },
    )


@register_criterion("bio_sentence_prediction", dataclass=BioSentencePredictionCriterionConfig)
class BioSentencePredictionCriterion(FairseqCriterion):
    """Loss on window-pooled head outputs; validation statistics for corpus-level metrics."""

    def __init__(self, cfg: Optional[BioSentencePredictionCriterionConfig], task):
        """``cfg`` None: the defaults (prediction builds the criterion for its pooling and scoring
        alone)."""
        super().__init__(task)
        self.head_name = task.cfg.head_name
        self.kind = task.kind
        spec = cfg.class_weights.strip() if cfg is not None else ""
        self.class_weight = self.build_class_weights(spec) if spec else None

    def build_class_weights(self, spec: str) -> torch.Tensor:
        """``K`` weights in task.labels order from ``criterion.class_weights`` (``balanced``:
        counted over the train split as the task reads it).

        BioMegatron §5.5's weighted cross-entropy for imbalanced relation extraction. ``balanced``
        gives class c the weight n / (K x n_c) over the n train examples (scikit-learn's
        ``compute_class_weight("balanced")``): the weights average 1 over the train set, so the
        loss keeps its scale. Multi-label and regression losses have no classes to weight: refused
        in one line."""
        option = f"criterion.class_weights={spec}"
        if self.kind != "classification":
            raise BioConfigError(
                f"{option}: task.kind={self.kind} has no classes to weight (single-label classification only)"
            )
        labels = list(self.task.labels)
        if spec == BALANCED:
            targets = self.task.targets(self.task.read_split("train"))
            weights = balanced_class_weights(targets.tolist(), labels, option)
        else:
            weights = parse_class_values(spec, labels, option)
        logger.info(
            "class weights (%s): %s",
            option,
            ", ".join(f"{n}={w:.4g}" for n, w in zip(labels, weights)),
        )
        return torch.tensor(weights, dtype=torch.float32)

    def pool(self, model, sample) -> torch.Tensor:
        """``B x K`` head outputs of the batch's examples: the mean over each example's windows.

        The head reads the ``<s>`` state (fairseq's classification head); with
        ``task.entity_representation=marker_start`` the concatenated states of the ``[E1]`` and
        ``[E2]`` tokens (``EntityStartClassificationHead``); with ``mention_pool`` /
        ``marker_mention`` the two entity mentions' states, each max-pooled, concatenated
        (``MentionPoolClassificationHead``; the batch's ``mentions`` give their spans)."""
        representation = getattr(self.task, "representation", None)
        if representation == "marker_start":
            features, _ = model(**sample["net_input"], features_only=True)
            starts = entity_start_positions(
                sample["net_input"]["src_tokens"], self.task.start_marker_ids
            )
            rows = model.classification_heads[self.head_name](features, starts)
        elif (
            "mentions" in sample
        ):  # mention_pool / marker_mention: the dataset found the mentions' pieces
            features, _ = model(**sample["net_input"], features_only=True)
            rows = model.classification_heads[self.head_name](
                features, sample["mentions"].to(features.device)
            )
        else:
            rows, _ = model(
                **sample["net_input"], features_only=True, classification_head_name=self.head_name
            )
        return pool_windows(rows.float(), sample["row_example"], sample["nsentences"])

    def forward(self, model, sample, reduce=True):
        outputs = self.pool(model, sample)
        target = sample.get("target")
        if target is None:
            loss = outputs.new_zeros(())
        elif self.kind == "classification":
            # the weighted sum over the examples, divided by their number (sample_size), not
            # torch's weighted mean: in training and validation alike
            weight = None if self.class_weight is None else self.class_weight.to(outputs)
            loss = F.cross_entropy(outputs, target, weight=weight, reduction="sum")
        elif self.kind == "multilabel":
            loss = F.binary_cross_entropy_with_logits(outputs, target.float(), reduction="sum")
        else:
            loss = F.mse_loss(outputs.squeeze(-1), target.float(), reduction="sum")
        sample_size = sample["nsentences"]
        logging_output = {
            "loss": loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["nsentences"],
            "sample_size": sample_size,
            "windows": sample["row_example"].numel(),
        }
        if not model.training and target is not None:
            logging_output.update(self.score(outputs.detach(), target, sample.get("document")))
        return loss, sample_size, logging_output

    def predict(self, outputs: torch.Tensor):
        """Class ids (B), 0/1 rows (B x K) or scores (B) from pooled head outputs."""
        if self.kind == "classification":
            return outputs.argmax(-1)
        if self.kind == "multilabel":
            return (torch.sigmoid(outputs) > self.task.cfg.threshold).long()
        return outputs.squeeze(-1)

    def score(self, outputs, target, documents=None):
        """Flat summable statistics of the batch; ``documents`` (B, multilabel): each row's
        document, whose rows are ORed into one before counting (batches never split a document).

        - classification: per-class counts (``accuracy``; ``macro_f1`` over the classes in gold or
          predictions, PubMedQA's evaluation.py) and counts over the positive classes
          (``precision`` / ``recall`` / ``f1``, ``task.negative_labels`` left out: BLURB's relation
          extraction);
        - multilabel: per-label counts (``f1`` pooled over every (document, label) cell, BLURB's
          HoC as LinkBERT's ``eval_hoc``; ``macro_f1`` per label); with ``documents``
          (``task.group_documents``: BLUE's HoC sentence rows) also BLUE's example-based sums
          (``example_f1``, BLUE's ``eval_hoc.py``; over the documents with a gold label);
        - regression: Pearson sums (BIOSSES)."""
        predicted = self.predict(outputs).tolist()
        gold = target.tolist()
        if self.kind == "multilabel" and documents is not None:
            _, gold, predicted = group_by_document(
                documents.tolist(), [[int(v) for v in g] for g in gold], predicted
            )
            out = log_fields(multilabel_counts(gold, predicted), LABEL)
            out.update(log_fields(example_sums(gold, predicted), EXAMPLE))
            return out
        labels = self.task.labels
        if self.kind == "classification":
            counts = class_counts(gold, predicted)
            out = log_fields({i: counts.get(i, SpanCounts()) for i in range(len(labels))}, CLASS)
            named_gold, named_pred = [labels[i] for i in gold], [labels[i] for i in predicted]
            out.update(
                log_fields(positive_counts(named_gold, named_pred, self.task.negatives), POSITIVE)
            )
            return out
        if self.kind == "multilabel":
            return log_fields(
                multilabel_counts([[int(v) for v in g] for g in gold], predicted), LABEL
            )
        return log_fields(pearson_sums(predicted, gold), PEARSON)

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        keys = {k for log in logging_outputs for k in log}

        def total(key):
            return sum(log.get(key, 0) for log in logging_outputs)

        sample_size = total("sample_size")
        metrics.log_scalar(
            "loss", total("loss") / max(sample_size, 1) / math.log(2), sample_size, round=3
        )
        metrics.log_scalar_sum("windows", total("windows"))
        stats = sorted(k for k in keys if k.startswith((CLASS, POSITIVE, LABEL, PEARSON, EXAMPLE)))
        for key in stats:
            metrics.log_scalar_sum(key, total(key))
        if not stats:
            return

        def percent(fn):
            return lambda m: round(100 * fn({k: m[k].sum for k in stats}), 2)

        if any(k.startswith(CLASS) for k in stats):
            classes = sorted({int(k.rsplit("_", 1)[1]) for k in stats if k.startswith(CLASS)})

            def per_class(totals):
                return from_log_fields(SpanCounts, totals, CLASS, classes)

            def accuracy(totals):
                counts = per_class(totals).values()
                return sum(c.correct for c in counts) / max(sum(c.gold for c in counts), 1)

            def macro(totals):
                seen = {c: n for c, n in per_class(totals).items() if n.gold or n.pred}
                return macro_f1_from(seen)

            metrics.log_derived("accuracy", percent(accuracy))
            metrics.log_derived("macro_f1", percent(macro))
            for i, name in enumerate(("precision", "recall", "f1")):
                metrics.log_derived(
                    name, percent(lambda t, i=i: from_log_fields(SpanCounts, t, POSITIVE).prf()[i])
                )
        elif any(k.startswith(LABEL) for k in stats):
            width = len({k.rsplit("_", 1)[1] for k in stats if k.startswith(LABEL)})

            def per_label(totals):
                return list(from_log_fields(SpanCounts, totals, LABEL, list(range(width))).values())

            for i, name in enumerate(("precision", "recall", "f1")):
                metrics.log_derived(name, percent(lambda t, i=i: hoc_prf_from(per_label(t))[i]))
            metrics.log_derived(
                "macro_f1", percent(lambda t: hoc_prf_from(per_label(t), "macro")[2])
            )
            if any(k.startswith(EXAMPLE) for k in stats):
                for i, name in enumerate(("example_precision", "example_recall", "example_f1")):
                    metrics.log_derived(
                        name,
                        percent(lambda t, i=i: from_log_fields(ExampleSums, t, EXAMPLE).prf()[i]),
                    )
                metrics.log_derived("documents", lambda m: int(m[EXAMPLE + "total"].sum))
        else:
            metrics.log_derived(
                "pearson", percent(lambda t: from_log_fields(PearsonSums, t, PEARSON).value())
            )

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True


def example_sums(gold, predicted) -> ExampleSums:
    """BLUE's example-based sums over the documents (0/1 rows) with at least one gold label (BLUE's
    script divides by zero on the others, and BLUE's files have none)."""
    return sum(
        (example_based_sums([g], [p]) for g, p in zip(gold, predicted) if any(g)), ExampleSums()
    )
