"""Loading a fine-tuned checkpoint for prediction, batching a dataset in length order, and the
metrics a criterion derives from a logging output (what fairseq-validate logs)."""

import os
from typing import Optional, Sequence

import torch

from ..files import InputError

TAGGING, SENTENCE, QA = "bio_tagging", "bio_sentence_prediction", "bio_extractive_qa"


def load_fine_tuned(
    checkpoint: str,
    vocab: Optional[str] = None,
    cpu: bool = False,
    fp16: bool = False,
    tasks=(TAGGING, SENTENCE, QA),
):
    """(task, model) of a checkpoint fine-tuned by one of ``tasks``, in eval mode; a checkpoint that
    is no such checkpoint, a shard, or was trained with another dictionary than the vocabulary's is
    refused in one line.
    """
    from fairseq import checkpoint_utils
    from fairseq import tasks as fairseq_tasks

    from ..checkpoint_fit import check_fits, read_state
    from ..checkpoints import checkpoint_section
    from ..tasks.fine_tuning import DICT_TXT, has_vocab

    if not os.path.exists(checkpoint):
        raise InputError(f"{checkpoint}: not found")
    contents = read_state(
        checkpoint
    )  # the tensors' bytes stay on disk: a look before fairseq loads it
    if (
        not isinstance(contents, dict)
        or "model" not in contents
        or not (contents.get("cfg") or contents.get("args"))
    ):
        raise InputError(f"{checkpoint}: not a fairseq checkpoint (no model and settings in it)")
    name = checkpoint_section(contents, "task").get("_name") or checkpoint_section(
        contents, "task"
    ).get("task")
    if name not in tasks:
        raise InputError(f"{checkpoint}: a {name} checkpoint, not a {' or '.join(tasks)} one")
    beside = os.path.dirname(os.path.abspath(checkpoint))
    overrides = {"vocab": vocab or (beside if has_vocab(beside) else None), "cache_dir": None}
    overrides = {k: v for k, v in overrides.items() if v is not None or k == "cache_dir"}
    state = checkpoint_utils.load_checkpoint_to_cpu(checkpoint, overrides)
    task = fairseq_tasks.setup_task(state["cfg"].task, from_checkpoint=True)
    rows = len(task.source_dictionary)  # the entity markers a sentence-level task appends included
    check_fits(
        checkpoint,
        contents,
        task.dictionary,
        os.path.join(task.vocab_dir, DICT_TXT),
        rows=rows,
        error=InputError,
    )
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [checkpoint], task=task, state=state
    )
    model = models[0].eval()
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
