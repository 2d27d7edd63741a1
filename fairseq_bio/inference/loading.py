"""Loading a checkpoint for prediction, export or an import's check; batching a dataset in length
order; the metrics a criterion derives from a logging output (what fairseq-validate logs)."""

import os
from pathlib import Path
from typing import Dict, Iterator, Optional, Sequence

import torch

from ..checkpoints import checkpoint_section, read_state
from ..files import InputError
from ..data.tokenizer_files import BPE_JSON
from ..tasks.fine_tuning import (
    DICT_TXT,
    has_vocab,
    recorded_vocab_dirs,
    start_checkpoint_path,
)

TAGGING, SENTENCE, QA = "bio_tagging", "bio_sentence_prediction", "bio_extractive_qa"


def load_for_inference(
    checkpoint, vocab=None, tasks: Sequence[str] = (), error=InputError, overrides=None
):
    """(cfg, task, model) of a fairseq checkpoint of ours, on the CPU in eval mode: the one way a
    model for prediction, export, an import's check or the hub interface is loaded. ``overrides``
    (fairseq's ``arg_overrides``) go on top; a ``bpe`` among them replaces the vocabulary's bpe.json.

    Refused in one line, as ``error``, before fairseq reads it: a missing file, one that is no
    fairseq checkpoint, another task than ``tasks`` (when given), no vocabulary found
    (``find_vocab_dir``), a shard, or a checkpoint trained with another dictionary.
    """
    from fairseq import checkpoint_utils

    from ..data.tokenizer_files import load_bpe_json

    if not os.path.exists(checkpoint):
        raise error(f"{checkpoint}: not found")
    contents = read_state(str(checkpoint))  # the tensors' bytes stay on disk until fairseq loads
    if (
        not isinstance(contents, dict)
        or "model" not in contents
        or not (contents.get("cfg") or contents.get("args"))
    ):
        raise error(f"{checkpoint}: not a fairseq checkpoint (no model and settings in it)")
    section = checkpoint_section(contents, "task")
    name = section.get("_name") or section.get("task")
    if tasks and name not in tasks:
        raise error(f"{checkpoint}: a {name} checkpoint, not a {' or '.join(tasks)} one")
    vocab_dir = find_vocab_dir(Path(checkpoint), contents, vocab, error)
    given = dict(overrides or {})
    overrides = {"vocab": str(vocab_dir), "cache_dir": None, "load_checkpoint_heads": True}
    if "vocab" not in section:  # pretraining tasks read their dictionary from the data directory
        overrides["data"] = str(vocab_dir)
    if "bpe" not in given:
        spec = load_bpe_json(str(vocab_dir / BPE_JSON))
        overrides.update(spec, bpe=spec.pop("_name"))
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(checkpoint)], arg_overrides={**overrides, **given}
    )
    return cfg, task, models[0].eval()


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


def hub_interface(checkpoint, vocab=None, error=InputError, overrides=None):
    """The checkpoint as fairseq's ``RobertaHubInterface`` (encode, extract_features, fill_mask;
    BPE from the vocabulary's bpe.json), on the CPU in eval mode."""
    from fairseq.models.roberta.hub_interface import RobertaHubInterface

    cfg, task, model = load_for_inference(checkpoint, vocab, error=error, overrides=overrides)
    return RobertaHubInterface(cfg, task, model).eval()


def find_vocab_dir(checkpoint: Path, state: Dict, given=None, error=InputError) -> Path:
    """Where dict.txt and bpe.json of the checkpoint's vocabulary are: ``given``, else the first of
    ``vocab_candidates`` that has both; checked against the checkpoint (``check_vocab_fits``).
    Neither found, or a vocabulary that does not fit, raises ``error``.
    """
    tried = []
    for directory in [given] if given is not None else vocab_candidates(checkpoint, state):
        tried.append(str(directory))
        if has_vocab(str(directory)):
            check_vocab_fits(checkpoint, state, directory, error)
            return Path(directory)
    raise error(
        f"{checkpoint}: no {DICT_TXT} + {BPE_JSON} in {' or '.join(tried)} "
        "(pass --vocab <vocabulary dir>)"
    )


def vocab_candidates(checkpoint: Path, state: Dict) -> Iterator[str]:
    """Where a checkpoint's vocabulary may be, in order: beside it (an encoder checkpoint, or a
    fine-tuned run's save_dir, which holds a copy), its ``task.vocab``, beside the encoder a
    fine-tuning run started from or where that encoder records its own, the first directory of its
    ``task.data`` (a pretraining run's data-bin)."""
    task, run = checkpoint_section(state, "task"), checkpoint_section(state, "checkpoint")
    yield str(checkpoint.parent)
    if task.get("vocab"):
        yield task["vocab"]
    start = start_checkpoint_path(run.get("restore_file"), run.get("finetune_from_model"))
    if start and os.path.isfile(start):
        yield os.path.dirname(os.path.abspath(start))
        yield from recorded_vocab_dirs(start)
    if task.get("data"):
        yield str(task["data"]).split(os.pathsep)[0]


def check_vocab_fits(checkpoint, state: Dict, vocab_dir, error=InputError) -> None:
    """Refuse, as ``error``, a checkpoint that is a shard or was trained with another dictionary
    than the one the tasks build from ``vocab_dir``'s dict.txt (``checkpoint_fit.check_fits``;
    without the record: its embedding rows, the entity markers of a sentence-level checkpoint
    counted)."""
    from fairseq.data import Dictionary

    from ..checkpoint_fit import check_fits
    from ..data.dictionary import load_dictionary

    dict_file = os.path.join(vocab_dir, DICT_TXT)
    dictionary = load_dictionary(dict_file, Dictionary)
    dictionary.add_symbol("<mask>")
    markers = (state.get("task_state") or {}).get("entity_markers") or ()
    rows = len(dictionary) + len(markers)  # the markers: rows after the dictionary's
    check_fits(checkpoint, state, dictionary, dict_file, rows=rows, error=error)


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
