"""A fine-tuned checkpoint for prediction (``checkpoint_fit.load_for_inference`` on the chosen
device); batching a dataset in length order; the metrics a criterion derives from a logging output
(what fairseq-validate logs)."""

from typing import Optional, Sequence

import torch

from ..checkpoint_fit import load_for_inference

TAGGING, SENTENCE, QA = "bio_tagging", "bio_sentence_prediction", "bio_extractive_qa"


def load_fine_tuned(
    checkpoint: str,
    vocab: Optional[str] = None,
    cpu: bool = False,
    fp16: bool = False,
    tasks=(TAGGING, SENTENCE, QA),
):
    """(task, model) of a checkpoint fine-tuned by one of ``tasks`` (``load_for_inference``), in
    half precision with ``fp16``, on the GPU when there is one and ``cpu`` is false."""
    _, task, model = load_for_inference(checkpoint, vocab, tasks)
    if fp16:
        model.half()
    if torch.cuda.is_available() and not cpu:
        model.cuda()
    return task, model


def batches(dataset, max_tokens: int, max_sentences: int, max_padding: float = 0.25):
    """Index lists in length order, each within ``max_tokens`` padded slots (a longer sentence
    alone), ``max_sentences``, and ``max_padding``: a batch is closed before its padding would
    exceed that fraction of its real tokens (a forward pass costs per padded slot, and one batch of
    a short, spread file is mostly padding).
    """
    order = dataset.ordered_indices()
    batch, width, real = [], 0, 0
    for i in order:
        size = int(dataset.sizes[i])
        wider = max(width, size)
        slots = wider * (len(batch) + 1)
        if batch and (
            slots > max_tokens
            or len(batch) >= max_sentences
            or slots > (1 + max_padding) * (real + size)
        ):
            yield batch
            batch, wider, real = [], size, 0
        batch.append(int(i))
        width, real = wider, real + size
    if batch:
        yield batch


def criterion_metrics(criterion, logging_output, hidden: Sequence[str] = ()) -> dict:
    """The corpus-level metrics (percentages) ``criterion`` derives from summed statistics, as
    fairseq-validate logs them; without the loss, the window count and ``hidden``."""
    from fairseq import metrics

    with metrics.aggregate(new_root=True) as agg:
        criterion.reduce_metrics([{"loss": 0.0, "sample_size": 1, **logging_output}])
        values = agg.get_smoothed_values()
    return {k: v for k, v in values.items() if k not in ("loss", "windows", *hidden)}
