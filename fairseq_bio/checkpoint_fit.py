"""Whether a checkpoint fits the run or command that reads it, said in one line before anything is
trained or predicted: a training run never writes over the checkpoints it reads; the dictionary a
checkpoint was trained with is the one it is given; the checkpoint is one whole model, not a shard;
and, when fairseq cannot load it into a run's model, which architecture options or vocabulary sizes
differ.

Every checkpoint the plugin's tasks save (their ``get_checkpoint_dict``, which fairseq merges into
the checkpoint's ``extra_state``) and every encoder checkpoint its commands write records its
dictionary in ``extra_state["dictionary_identity"]`` (``dictionary_record``): the symbols in id
order (the specials, ``dict.txt``'s lines, ``<mask>``), their count and sha256, and the ``dict.txt``
they were read from. A checkpoint without the record (older, or made elsewhere) is checked by what
it does record: its embedding rows and the ``dict.txt`` of the data directory it names.

A model for prediction, export or the hub interface (``hub``) is loaded here too
(``load_for_inference``), after its vocabulary is found and checked against it (``find_vocab_dir``).
"""

import hashlib
import os
import re
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from .checkpoints import checkpoint_section, read_state
from .data.tokenizer_files import BPE_JSON, load_bpe_json
from .errors import BioConfigError
from .files import InputError

# Model options that decide the parameter shapes or the computation: a training run restoring an
# imported checkpoint must set them (on top of any primary config).
STRUCTURAL_OPTIONS = (
    "encoder_layers",
    "encoder_embed_dim",
    "encoder_ffn_embed_dim",
    "encoder_attention_heads",
    "encoder_normalize_before",
    "layernorm_embedding",
    "layer_norm_eps",
    "activation_fn",
    "max_positions",
    "untie_weights_roberta",
    "token_types",
    "bert_pairs",
)
# The same for a bio_electra checkpoint: both encoders' sizes and the shared embedding width.
ELECTRA_STRUCTURAL_OPTIONS = (
    "encoder_layers",
    "encoder_embed_dim",
    "encoder_ffn_embed_dim",
    "encoder_attention_heads",
    "generator_layers",
    "generator_embed_dim",
    "generator_ffn_embed_dim",
    "generator_attention_heads",
    "embedding_dim",
    "encoder_normalize_before",
    "layernorm_embedding",
    "layer_norm_eps",
    "activation_fn",
    "max_positions",
    "token_types",
)

RECORD = "dictionary_identity"  # the extra_state key of the record
DICT_TXT = "dict.txt"
DEFAULT_RESTORE_FILE = (
    "checkpoint_last.pt"  # fairseq's default: resume the run in checkpoint.save_dir
)
# The rows of the token embeddings: a bio_roberta's, a bio_electra's (shared by its two encoders).
EMBEDDING_KEYS = (
    "encoder.sentence_encoder.embed_tokens.weight",
    "discriminator.embed_tokens.weight",
)
# What fixes a model's shapes, compared when fairseq cannot load a checkpoint into a run's model.
ARCHITECTURE_OPTIONS = ("arch",) + tuple(
    dict.fromkeys(STRUCTURAL_OPTIONS + ELECTRA_STRUCTURAL_OPTIONS)
)
CONSOLIDATE = (
    "consolidate the shards into one checkpoint first (a fully sharded run of this plugin writes consolidated "
    "checkpoints: use those)"
)


# ------------------------------------------------------------------------------------------------ dictionaries


def dictionary_record(dictionary, file: Optional[str]) -> Dict:
    """What a checkpoint records of the dictionary it was trained with (``extra_state[RECORD]``)."""
    symbols = [str(s) for s in dictionary.symbols]
    return {
        "size": len(symbols),
        "sha256": _sha256(symbols),
        "symbols": symbols,
        "file": os.path.abspath(file) if file else None,
    }


def _sha256(symbols: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(symbols).encode("utf-8")).hexdigest()


def recorded_dictionary(state) -> Optional[Dict]:
    """The record of a loaded checkpoint (None when it has none)."""
    extra = state.get("extra_state") if isinstance(state, dict) else None
    record = extra.get(RECORD) if isinstance(extra, dict) else None
    return record if isinstance(record, dict) and isinstance(record.get("symbols"), list) else None


def task_vocabulary(task) -> Tuple[object, str]:
    """(dictionary, its dict.txt) of a task: a fine-tuning task's vocabulary, else the first data
    directory's."""
    vocab_dir = getattr(task, "vocab_dir", None)
    if vocab_dir:
        return task.dictionary, os.path.join(vocab_dir, DICT_TXT)
    data = getattr(getattr(task, "cfg", None), "data", None)
    dictionary = getattr(task, "dictionary", None) or task.source_dictionary
    if data:
        return dictionary, os.path.join(str(data).split(os.pathsep)[0], DICT_TXT)
    return dictionary, "the task's dictionary"


def first_difference(
    ours: Sequence[str], theirs: Sequence[str], ours_name: str, theirs_name: str
) -> str:
    """Where two dictionaries' symbol lists (ids in order) first differ, in words: the sizes when
    they differ, the first differing id with its dict.txt line and both symbols."""
    i = next(
        (i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs))
    )
    line = (
        f" (line {i - 3})" if i >= 4 else ""
    )  # fairseq's four specials come before dict.txt's lines
    if len(ours) == len(theirs):
        return f"symbol {i}{line} is {ours[i]!r} in {ours_name} and {theirs[i]!r} in {theirs_name}"
    sizes = f"{ours_name} has {len(ours)} symbols and {theirs_name} {len(theirs)}"
    return sizes + (
        f", first differing at symbol {i}{line}: {ours[i]!r} and {theirs[i]!r}"
        if i < min(len(ours), len(theirs))
        else ""
    )


def embedding_rows(state) -> Optional[int]:
    """Rows of a checkpoint's token embeddings (None when it has none the plugin knows)."""
    weights = state.get("model") if isinstance(state, dict) else None
    for key in EMBEDDING_KEYS:
        if isinstance(weights, dict) and torch.is_tensor(weights.get(key)):
            return int(weights[key].shape[0])
    return None


def checkpoint_cfg(state, name: str) -> Dict:
    """Section ``name`` (model, task) of a loaded checkpoint's settings as a dict (empty when it has
    none)."""
    section = checkpoint_section(state, name) if isinstance(state, dict) else {}
    return dict(section.items()) if hasattr(section, "items") else {}


def recorded_dict_files(state) -> List[str]:
    """The dict.txt of the vocabulary and data directories a checkpoint's task settings name."""
    task = checkpoint_cfg(state, "task")
    dirs = [task.get("vocab")] + (
        [str(task["data"]).split(os.pathsep)[0]] if task.get("data") else []
    )
    return [os.path.join(str(d), DICT_TXT) for d in dirs if d]


def check_dictionary(
    checkpoint,
    state,
    dictionary,
    dict_file: str,
    rows: Optional[int] = None,
    verb: str = "was trained",
    error=BioConfigError,
) -> None:
    """Refuse ``dictionary`` (read from ``dict_file``) for a checkpoint trained with another one: by
    the record when the checkpoint has one; else by its embedding rows, when ``rows`` (what the
    model built for it embeds) is given, and by the dict.txt of the data directory the checkpoint
    names."""
    record = recorded_dictionary(state)
    symbols = [str(s) for s in dictionary.symbols]
    if record is not None:
        if record["symbols"] == symbols:
            return
        recorded = record.get("file")
        if recorded and os.path.abspath(recorded) != os.path.abspath(dict_file):
            where, ours, theirs = (
                f"{recorded}, which differs from {dict_file}",
                "the checkpoint's",
                dict_file,
            )
        else:  # the same file, changed since (re-binarised, edited)
            where, ours, theirs = (
                f"{dict_file} as it was then, not as it is now",
                "the checkpoint's",
                "today's",
            )
        first = first_difference(record["symbols"], symbols, ours, theirs)
        raise error(
            f"{checkpoint}: {verb} with {where}: {first} (each token id would mean another token)"
        )
    found = embedding_rows(state)
    if rows is not None and found is not None and found != rows:
        raise error(
            f"{checkpoint}: its embeddings have {found} rows but {dict_file} gives {rows} symbols (with <mask>): "
            f"the checkpoint {verb} with another vocabulary"
        )
    for other in recorded_dict_files(state):
        if os.path.isfile(other) and os.path.abspath(other) != os.path.abspath(dict_file):
            theirs, ours = _dict_symbols(other), _dict_symbols(dict_file)
            if theirs is not None and ours is not None and theirs != ours:
                first = first_difference(theirs, ours, other, dict_file)
                raise error(
                    f"{checkpoint}: {verb} with {other}, which differs from {dict_file}: {first}"
                )
            break


def _dict_symbols(path: str) -> Optional[List[str]]:
    """The symbols of a dict.txt's lines after fairseq's four specials, so that ids match a
    dictionary's (None when it cannot be read: its own loading says why)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line.rstrip("\n").rsplit(" ", 1)[0] for line in f if line.strip()]
    except (OSError, UnicodeDecodeError):
        return None
    return ["<s>", "<pad>", "</s>", "<unk>"] + lines


# ------------------------------------------------------------------------------------------------ whole models

_LAYER = re.compile(r"^(.*\.)?layers\.(\d+)\.(.+)$")


def shard_problem(state) -> Optional[str]:
    """Why a loaded checkpoint holds one shard of a model rather than the whole model (None when
    nothing shows): fairscale's flat FSDP parameters, or transformer layers whose tensors contradict
    each other or the checkpoint's own model settings (each cut along one dimension, layers
    missing)."""
    weights = state.get("model") if isinstance(state, dict) else None
    if not isinstance(weights, dict):
        return None
    if (
        "fsdp_metadata" in state
        or "shard_metadata" in state
        or any("flat_param" in key or "_fsdp_wrapped_module" in key for key in weights)
    ):
        return "an unconsolidated fully sharded (FSDP) state: flat parameter shards, not the model's tensors"
    layers: Dict[str, Dict[int, Dict[str, tuple]]] = {}
    for key, value in weights.items():
        match = _LAYER.match(key)
        if match and torch.is_tensor(value):
            layers.setdefault(match.group(1) or "", {}).setdefault(int(match.group(2)), {})[
                match.group(3)
            ] = tuple(value.shape)
    model = checkpoint_cfg(state, "model")
    for prefix, by_index in layers.items():
        if not any("self_attn.q_proj.weight" in shapes for shapes in by_index.values()):
            continue  # not transformer layers
        missing = sorted(set(range(max(by_index) + 1)) - set(by_index))
        if missing:
            return f"{prefix}layers.{missing[0]} is missing (layers {', '.join(map(str, sorted(by_index)))} are there)"
        if prefix == "encoder.sentence_encoder." and model.get("encoder_layers") not in (
            None,
            len(by_index),
        ):
            return f"{len(by_index)} layers where its settings say encoder_layers={model['encoder_layers']}"
        for i, shapes in sorted(by_index.items()):
            problem = _layer_problem(shapes, by_index[0])
            if problem:
                return f"{prefix}layers.{i}.{problem}"
        width = model.get("encoder_embed_dim") if prefix == "encoder.sentence_encoder." else None
        q = by_index[0].get("self_attn.q_proj.weight")
        if width and q and q != (width, width):
            return f"{prefix}layers.0.self_attn.q_proj.weight is {q}, where encoder_embed_dim={width} makes it square"
    return None


def _layer_problem(shapes: Dict[str, tuple], first: Dict[str, tuple]) -> Optional[str]:
    if set(shapes) != set(first):
        return f"{sorted(set(first) ^ set(shapes))[0]}: present in one layer and not in another"
    q = shapes.get("self_attn.q_proj.weight")
    if q and len(q) == 2 and q[0] != q[1]:
        return f"self_attn.q_proj.weight is {q}, not square"
    fc1, fc2 = shapes.get("fc1.weight"), shapes.get("fc2.weight")
    if fc1 and fc2 and fc2 != fc1[::-1]:
        return f"fc2.weight is {fc2}, not the transpose of fc1.weight's {fc1}"
    if q and fc1 and len(fc1) == 2 and fc1[1] != q[1]:
        return f"fc1.weight is {fc1} for a width of {q[1]}"
    return None


def check_whole(checkpoint, state, error=BioConfigError) -> None:
    """Refuse a checkpoint that holds one shard of a model (``shard_problem``)."""
    problem = shard_problem(state)
    if problem:
        raise error(
            f"{checkpoint}: one shard of a model, not a whole one ({problem}); {CONSOLIDATE}"
        )


def check_fits(
    checkpoint,
    state,
    dictionary,
    dict_file: str,
    rows: Optional[int] = None,
    verb: str = "was trained",
    error=BioConfigError,
) -> None:
    """A whole model (``check_whole``) trained with ``dictionary`` (``check_dictionary``)."""
    check_whole(checkpoint, state, error)
    check_dictionary(checkpoint, state, dictionary, dict_file, rows, verb, error)


# ------------------------------------------------------------------------- vocabularies, models for inference


def start_checkpoint_path(
    restore_file: Optional[str], finetune_from_model: Optional[str]
) -> Optional[str]:
    """The encoder checkpoint a run starts from (None when it starts from scratch or resumes its own
    run)."""
    for path in (finetune_from_model, restore_file):
        if path and path != DEFAULT_RESTORE_FILE:
            return path
    return None


def has_vocab(directory: Optional[str]) -> bool:
    """Whether ``directory`` holds a vocabulary: dict.txt and bpe.json."""
    return bool(directory) and all(
        os.path.exists(os.path.join(directory, f)) for f in (DICT_TXT, BPE_JSON)
    )


def recorded_vocab_dirs(checkpoint: str) -> List[str]:
    """The vocabulary directories ``checkpoint`` records: its ``task.vocab``, its first data dir."""
    task = checkpoint_cfg(read_state(checkpoint), "task")
    dirs = [task["vocab"]] if task.get("vocab") else []
    if task.get("data"):
        dirs.append(str(task["data"]).split(os.pathsep)[0])
    return dirs


def vocab_candidates(checkpoint: Path, state: Dict) -> Iterator[str]:
    """Where a checkpoint's vocabulary may be, in order: beside it (an encoder checkpoint, or a
    fine-tuned run's save_dir, which holds a copy), its ``task.vocab``, beside the encoder a
    fine-tuning run started from or where that encoder records its own, the first directory of its
    ``task.data`` (a pretraining run's data-bin)."""
    task, run = checkpoint_cfg(state, "task"), checkpoint_cfg(state, "checkpoint")
    yield str(checkpoint.parent)
    if task.get("vocab"):
        yield task["vocab"]
    start = start_checkpoint_path(run.get("restore_file"), run.get("finetune_from_model"))
    if start and os.path.isfile(start):
        yield os.path.dirname(os.path.abspath(start))
        yield from recorded_vocab_dirs(start)
    if task.get("data"):
        yield str(task["data"]).split(os.pathsep)[0]


def find_vocab_dir(checkpoint: Path, state: Dict, given=None, error=InputError) -> Path:
    """Where dict.txt and bpe.json of the checkpoint's vocabulary are: ``given``, else the first of
    ``vocab_candidates`` that has both; checked against the checkpoint (``check_vocab_fits``).
    Neither found, or a vocabulary that does not fit, raises ``error``.
    """
    tried = []
    for directory in [given] if given is not None else vocab_candidates(Path(checkpoint), state):
        tried.append(str(directory))
        if has_vocab(str(directory)):
            check_vocab_fits(checkpoint, state, directory, error)
            return Path(directory)
    raise error(
        f"{checkpoint}: no {DICT_TXT} + {BPE_JSON} in {' or '.join(tried)} "
        "(pass --vocab <vocabulary dir>)"
    )


def check_vocab_fits(checkpoint, state: Dict, vocab_dir, error=InputError) -> None:
    """Refuse, as ``error``, a checkpoint that is a shard or was trained with another dictionary
    than the one the tasks build from ``vocab_dir``'s dict.txt (``check_fits``; without the record:
    its embedding rows, the entity markers of a sentence-level checkpoint counted)."""
    from fairseq.data import Dictionary

    from .data.dictionary import load_dictionary

    dict_file = os.path.join(vocab_dir, DICT_TXT)
    dictionary = load_dictionary(dict_file, Dictionary)
    dictionary.add_symbol("<mask>")
    markers = (state.get("task_state") or {}).get("entity_markers") or ()
    rows = len(dictionary) + len(markers)  # the markers: rows after the dictionary's
    check_fits(checkpoint, state, dictionary, dict_file, rows=rows, error=error)


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


# ------------------------------------------------------------------------------------------- training runs


def _fairseq_name(suffix: str) -> "re.Pattern":
    # checkpoint_best, checkpoint_last, checkpoint<epoch>, checkpoint_<epoch>_<update>,
    # checkpoint.best_<metric>
    return re.compile(
        r"checkpoint(?:_best|_last|\d+|_\d+_\d+|\.best_.+)" + re.escape(suffix or "") + r"\.pt"
    )


def written_by_fairseq(path, save_dir, suffix: str = "") -> bool:
    """Whether ``path`` (links followed) is a file that a training run saving into ``save_dir``
    writes over."""
    if not path or not save_dir:
        return False
    real = os.path.realpath(os.fspath(path))
    return os.path.dirname(real) == os.path.realpath(os.fspath(save_dir)) and bool(
        _fairseq_name(suffix).fullmatch(os.path.basename(real))
    )


def start_checkpoint(checkpoint_cfg_, suffix: str = "") -> Tuple[Optional[str], Optional[str]]:
    """(option, path) of the checkpoint a training run loads before its first update, by fairseq's
    own rule in ``checkpoint_utils.load_checkpoint`` (its existence tests too):
    ``checkpoint.restore_file`` when given; else the run's own ``checkpoint_last.pt`` when it is
    there, else ``checkpoint.continue_once`` or ``checkpoint.finetune_from_model``; (None, None)
    when it starts from scratch."""
    from fairseq.file_io import PathManager

    cfg = checkpoint_cfg_
    if cfg.restore_file and cfg.restore_file != DEFAULT_RESTORE_FILE:
        # fairseq's own suffix rule (checkpoint.checkpoint_suffix, model-parallel ranks)
        return "checkpoint.restore_file", cfg.restore_file.replace(".pt", suffix + ".pt")
    last = os.path.join(cfg.save_dir or ".", f"checkpoint_last{suffix}.pt")
    if PathManager.exists(last):
        return None, last  # resuming its own run
    if getattr(cfg, "continue_once", None) is not None:
        return "checkpoint.continue_once", cfg.continue_once
    if getattr(cfg, "finetune_from_model", None) and PathManager.exists(cfg.finetune_from_model):
        return "checkpoint.finetune_from_model", cfg.finetune_from_model
    return None, None


def check_not_overwritten(
    save_dir, reads: Dict[str, str], suffix: str = "", error=BioConfigError
) -> None:
    """Refuse a ``save_dir`` that holds one of the files a run reads ({option: path}) under a name
    fairseq writes there (checkpoint_best.pt, checkpoint_last.pt, checkpointN.pt,
    checkpoint_N_M.pt)."""
    for option, path in reads.items():
        if written_by_fairseq(path, save_dir, suffix):
            raise error(
                f"checkpoint.save_dir={save_dir}: holds {option}={path}, which this run would write over (fairseq "
                f"saves {os.path.basename(path)} there); give another checkpoint.save_dir"
            )


def starts_a_new_run(checkpoint_cfg_, state, task_name: Optional[str]) -> bool:
    """Whether loading ``state`` starts another run rather than resuming the one that saved it: a
    reset flag is set, or it was saved by another task."""
    cfg = checkpoint_cfg_
    if any(
        getattr(cfg, flag, False)
        for flag in ("reset_optimizer", "reset_lr_scheduler", "reset_meters", "reset_dataloader")
    ):
        return True
    recorded = checkpoint_cfg(state, "task").get("_name") if state is not None else None
    return bool(task_name and recorded and recorded != task_name)


def check_start_kept(
    checkpoint_cfg_,
    task_name: Optional[str],
    reads: Optional[Dict[str, str]] = None,
    suffix: str = "",
) -> Tuple[Optional[str], Optional[Dict]]:
    """Refuse a ``checkpoint.save_dir`` that holds the checkpoint a run starts from (unless the run
    resumes the one that saved it: ``starts_a_new_run``) or one of the other files it ``reads``
    ({option: path}). Returns (the checkpoint fairseq will load, its contents read without the
    tensors' bytes); (None, None) when there is none.
    """
    option, path = start_checkpoint(checkpoint_cfg_, suffix)
    state = read_state(path) if isinstance(path, str) and os.path.isfile(path) else None
    reads = dict(reads or {})
    # fairseq starts a new run from finetune_from_model (every reset flag set); a restore_file may
    # resume
    if option == "checkpoint.finetune_from_model" or (
        option and starts_a_new_run(checkpoint_cfg_, state, task_name)
    ):
        reads[option] = path
    check_not_overwritten(checkpoint_cfg_.save_dir, reads, suffix)
    return path, state


def check_run_start(checkpoint_cfg_, trainer) -> Tuple[Optional[str], Optional[Dict]]:
    """Before a training run loads anything (``checkpoint_utils.load_checkpoint``):
    ``check_start_kept`` with the files its criterion reads (``criterion.reads``), then refuse a
    checkpoint that is a shard or was trained with another dictionary than the task's. Returns what
    ``check_start_kept`` does."""
    task = trainer.task
    reads = getattr(trainer.get_criterion(), "reads", None)
    task_name = getattr(getattr(task, "cfg", None), "_name", None)
    path, state = check_start_kept(
        checkpoint_cfg_, task_name, reads, trainer.checkpoint_suffix or ""
    )
    if state is not None:
        check_whole(path, state)
        vocabulary = _task_vocabulary_or_none(task)
        if vocabulary is not None:  # the sizes: fairseq's loading, then load_failure
            check_dictionary(path, state, *vocabulary)
    return path, state


def _task_vocabulary_or_none(task):
    try:
        return task_vocabulary(task)
    except (
        AttributeError,
        NotImplementedError,
    ):  # a task with no single dictionary (translation, ...)
        return None


def load_failure(path, state, trainer) -> Optional[BioConfigError]:
    """Why fairseq could not load the checkpoint ``path`` (``state``) into the run's model, in one
    line naming the architecture options or the vocabulary sizes that differ; None when none of them
    explains it."""
    problem = shard_problem(state)
    if problem:
        return BioConfigError(
            f"{path}: one shard of a model, not a whole one ({problem}); {CONSOLIDATE}"
        )
    recorded, current = checkpoint_cfg(state, "model"), trainer.cfg.model
    differ = []
    for key in ARCHITECTURE_OPTIONS:
        theirs, ours = recorded.get(key), (
            current.get(key) if hasattr(current, "get") else getattr(current, key, None)
        )
        if theirs is not None and ours is not None and theirs != ours:
            differ.append(f"model.{key}={ours} here, {theirs} in it")
    if differ:
        return BioConfigError(
            f"{path}: built with another architecture than this run's model: {', '.join(differ)}; give the "
            "checkpoint's settings, or another checkpoint.save_dir to start a new run"
        )
    weights = state.get("model") or {}
    mine = trainer.get_model().state_dict()
    for key in EMBEDDING_KEYS:
        if (
            torch.is_tensor(weights.get(key))
            and key in mine
            and weights[key].shape[0] != mine[key].shape[0]
        ):
            _, dict_file = _task_vocabulary_or_none(trainer.task) or (None, "its dictionary")
            return BioConfigError(
                f"{path}: its embeddings have {weights[key].shape[0]} rows but this run's model has "
                f"{mine[key].shape[0]} from {dict_file}: trained with another vocabulary (or data-bin)"
            )
    for key, value in weights.items():
        if torch.is_tensor(value) and key in mine and tuple(value.shape) != tuple(mine[key].shape):
            return BioConfigError(
                f"{path}: does not fit this run's model: {key} is {tuple(value.shape)} in it and "
                f"{tuple(mine[key].shape)} here"
            )
    return None
