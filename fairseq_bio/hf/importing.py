"""What ``fairseq-bio-import-hf`` runs: an HF BERT, RoBERTa, ELECTRA, DistilBERT or MegatronBERT
directory as a ``bio_roberta`` encoder checkpoint, and an HF ELECTRA pair as a ``bio_electra``
checkpoint.

``out_dir`` receives ``model.pt``, the vocabulary (``dict.txt``, ``bpe.json``, its BPE files) and
``import_info.json``; HF ids map one to one onto fairseq's. Before the directory appears, HF's and
fairseq's tokens, every layer's states and the heads' logits must agree on real sentences. The
mapping in detail: docs/hf-interop.md.
"""

from pathlib import Path
from typing import Dict, Sequence

import torch

from ..data.pair_format import PairFormat
from ..data.tokenizer_files import require_fastbpe
from ..files import check_destination, make_temp_dir, remove_temp_dir, replace_dir, write_json
from ..hub import hub_interface
from ..encoder_checkpoints import (
    ELECTRA_STRUCTURAL_OPTIONS,
    build_model,
    electra_checkpoint_cfg,
    encoder_checkpoint,
    encoder_checkpoint_cfg,
    hydra_model_overrides,
)
from .common import CHECKPOINT_FILE, DEFAULT_TOLERANCE, HFConvertError
from .config import read_hf_config
from .electra import PARTS, check_pair_configs, electra_pair_to_fairseq, read_pair_weights
from .tokenizers import FAIRSEQ_ROLES, MASK
from .verify import CHECK_PAIRS, CHECK_SENTENCES, compare_electra_with_hf, compare_with_hf
from .vocab import read_hf_vocab, write_vocab_files
from .weights import LM_HEAD, hf_to_fairseq_state, read_hf_weights

IMPORT_INFO = "import_info.json"
IMPORT_HF = (
    "fairseq-bio-import-hf"  # what the output directory is recorded as made by (fairseq_bio.files)
)
MARKERS = (CHECKPOINT_FILE, IMPORT_INFO)


def import_hf(
    hf_dir,
    out_dir,
    *,
    overwrite: bool = False,
    verify: bool = True,
    tolerance: float = DEFAULT_TOLERANCE,
    seed: int = 1,
    sentences: Sequence[str] = CHECK_SENTENCES,
    log=print,
) -> Dict:
    """Convert ``hf_dir`` into the encoder checkpoint directory ``out_dir`` (built in a temp dir,
    renamed when checked); returns what ``import_info.json`` records. Every input problem is an
    ``HFConvertError`` raised before anything is written."""
    hf_dir, out_dir = Path(hf_dir), Path(out_dir).absolute()
    if not hf_dir.is_dir():
        raise HFConvertError(f"{hf_dir}: not a directory")
    config = read_hf_config(hf_dir)
    vocab = read_hf_vocab(hf_dir)
    if vocab.kind == "fastbpe":
        require_fastbpe()  # fairseq's --bpe fastbpe, and so the output check, run fastBPE's applier
    weights, weights_path = read_hf_weights(hf_dir)
    converted = hf_to_fairseq_state(config, weights, vocab, weights_path)
    check_destination(out_dir, overwrite, MARKERS, by=IMPORT_HF)
    if verify:
        _require_transformers()

    options = converted.model_options
    architecture = ", ".join(config.get("architectures") or [config["model_type"]])
    info = {
        "source": str(hf_dir.absolute()),
        "model_type": config["model_type"],
        "architectures": config.get("architectures"),
        "weights": weights_path.name,
        "tokenizer": vocab.source.name,
        "vocabulary": {"kind": vocab.kind, "size": len(vocab.tokens), "lowercase": vocab.lowercase},
        "mlm_head": "imported" if converted.has_mlm_head else "initialised",
        "dropped": converted.dropped,
        "model": options,
        "hydra_overrides": hydra_model_overrides(options),
        "check": None,
    }
    tmp = make_temp_dir(out_dir)
    try:
        write_vocab_files(vocab, tmp)
        cfg = encoder_checkpoint_cfg(
            str(out_dir), options, tokens_per_sample=min(512, options["max_positions"])
        )
        torch.manual_seed(seed)  # the initialisation of a missing MLM head
        task, model = build_model(cfg, str(tmp))
        _check_dictionary(task.source_dictionary, vocab)
        # fairseq's format version buffers too: without them its upgrade path takes the encoder for
        # a pre-2019 one.
        versions = {k: v for k, v in model.state_dict().items() if k.endswith(".version")}
        missing, unexpected = model.load_state_dict({**versions, **converted.state}, strict=False)
        head = {
            LM_HEAD + p
            for p in ("dense.weight", "dense.bias", "layer_norm.weight", "layer_norm.bias", "bias")
        }
        if unexpected or set(missing) - (set() if converted.has_mlm_head else head):
            raise HFConvertError(
                f"{weights_path}: bio_roberta's parameters differ: {unexpected or missing}"
            )
        if not converted.has_mlm_head:
            log(
                f"{hf_dir}: no MLM head ({architecture}); initialised a new one (seed {seed}) for continued pretraining"
            )
        if converted.dropped:
            log(f"{hf_dir}: dropped {'; '.join(converted.dropped)}")
        extra = {
            "hf_import": {k: info[k] for k in ("source", "mlm_head")},
            **_dictionary(task, out_dir),
        }
        state = encoder_checkpoint(cfg, model.state_dict(), extra)
        torch.save(state, tmp / CHECKPOINT_FILE)
        if verify:
            # a model reading BERT's pairs is also checked on pairs: HF's tokenizer(a, b) (and its
            # token_type_ids) against the hub's encode(a, b) (and segment ids)
            pair = PairFormat(options["token_types"] > 0, options["bert_pairs"])
            texts = tuple(sentences) + (CHECK_PAIRS if pair.one_separator else ())
            info["check"] = _verify(hf_dir, tmp, vocab, converted.has_mlm_head, texts, tolerance)
            pairs = f" ({info['check']['pairs']} pairs)" if info["check"]["pairs"] else ""
            log(
                f"checked on {len(texts)} real sentences{pairs}: token ids equal HF's; "
                f"{_describe(info['check'])}"
            )
        write_json(tmp / IMPORT_INFO, info)
        replace_dir(tmp, out_dir, overwrite, MARKERS, by=IMPORT_HF)
    except BaseException:
        remove_temp_dir(tmp)
        raise
    return info


def import_electra_pair(
    discriminator_dir,
    generator_dir,
    out_dir,
    *,
    overwrite: bool = False,
    verify: bool = True,
    tolerance: float = DEFAULT_TOLERANCE,
    sentences: Sequence[str] = CHECK_SENTENCES,
    log=print,
) -> Dict:
    """Convert an HF ELECTRA pair (``ElectraForPreTraining`` and ``ElectraForMaskedLM`` directories)
    into the bio_electra checkpoint directory ``out_dir`` (built in a temp dir, renamed when
    checked); returns what ``import_info.json`` records. Every input problem is an
    ``HFConvertError`` raised before anything is written.
    """
    dirs = {"discriminator": Path(discriminator_dir), "generator": Path(generator_dir)}
    out_dir = Path(out_dir).absolute()
    for part, directory in dirs.items():
        if not directory.is_dir():
            raise HFConvertError(f"{directory}: not a directory (the {part})")
    configs = {
        part: read_hf_config(directory, embedding_projection=True)
        for part, directory in dirs.items()
    }
    check_pair_configs(
        configs, {part: directory / "config.json" for part, directory in dirs.items()}
    )
    vocab, other = read_hf_vocab(dirs["discriminator"]), read_hf_vocab(dirs["generator"])
    if any(
        getattr(vocab, key) != getattr(other, key)
        for key in ("kind", "tokens", "roles", "lowercase", "merges", "added")
    ):
        raise HFConvertError(
            f"{other.source}: the generator's tokenizer differs from the discriminator's ({vocab.source})"
        )
    if vocab.kind == "fastbpe":
        require_fastbpe()
    weights, paths = read_pair_weights(dirs)
    converted = electra_pair_to_fairseq(configs, weights, vocab, paths)
    check_destination(out_dir, overwrite, MARKERS, by=IMPORT_HF)
    if verify:
        _require_transformers()

    options = converted.model_options
    info = {
        "source": {part: str(directory.absolute()) for part, directory in dirs.items()},
        "model_type": "electra",
        "architectures": {part: configs[part].get("architectures") for part in PARTS},
        "weights": {part: paths[part].name for part in PARTS},
        "tokenizer": vocab.source.name,
        "vocabulary": {"kind": vocab.kind, "size": len(vocab.tokens), "lowercase": vocab.lowercase},
        "model": options,
        "hydra_overrides": hydra_model_overrides(options, ELECTRA_STRUCTURAL_OPTIONS),
        "check": None,
    }
    tmp = make_temp_dir(out_dir)
    try:
        write_vocab_files(vocab, tmp)
        cfg = electra_checkpoint_cfg(
            str(out_dir), options, tokens_per_sample=min(512, options["max_positions"])
        )
        task, model = build_model(cfg, str(tmp))
        _check_dictionary(task.source_dictionary, vocab)
        versions = {k: v for k, v in model.state_dict().items() if k.endswith(".version")}
        missing, unexpected = model.load_state_dict({**versions, **converted.state}, strict=False)
        from ..models.bio_electra import SHARED

        # The generator's views of the shared parameters (loaded through the discriminator's, the
        # same Parameters).
        shared = {"generator_head.weight"} | {"generator." + key for key in SHARED}
        if unexpected or set(missing) - shared:
            raise HFConvertError(
                f"{paths['discriminator']}: bio_electra's parameters differ: {unexpected or missing}"
            )
        source = {
            "source": info["source"]["discriminator"],
            "generator": info["source"]["generator"],
        }
        state = encoder_checkpoint(
            cfg,
            model.state_dict(),
            {"hf_import": source, **_dictionary(task, out_dir)},
            "BioElectraCriterion",
        )
        torch.save(state, tmp / CHECKPOINT_FILE)
        if verify:
            info["check"] = _verify_pair(dirs, tmp, vocab, sentences, tolerance)
            log(
                f"checked on {len(sentences)} real sentences: token ids equal HF's; {_describe_pair(info['check'])}"
            )
        write_json(tmp / IMPORT_INFO, info)
        replace_dir(tmp, out_dir, overwrite, MARKERS, by=IMPORT_HF)
    except BaseException:
        remove_temp_dir(tmp)
        raise
    return info


def _require_transformers() -> None:
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise HFConvertError(
            "the output check needs transformers (pip install transformers, or --no-verify)"
        )


def _dictionary(task, out_dir: Path) -> Dict:
    """The record of the dictionary a run restoring the import will compare with its own
    (``checkpoint_fit``)."""
    from ..checkpoint_fit import RECORD, dictionary_record

    return {RECORD: dictionary_record(task.source_dictionary, str(out_dir / "dict.txt"))}


def _check_dictionary(dictionary, vocab) -> None:
    # The dictionary fairseq itself builds from dict.txt (+ the task's <mask>) must be exactly the
    # intended order.
    symbols = [dictionary[i] for i in range(len(dictionary))]
    expected = list(FAIRSEQ_ROLES) + vocab.dict_symbols() + [MASK]
    if symbols != expected:
        first = next(
            (i for i, (a, b) in enumerate(zip(symbols, expected)) if a != b),
            min(len(symbols), len(expected)),
        )
        raise HFConvertError(
            f"{vocab.source}: fairseq's dictionary differs from the HF vocabulary at id {first}"
        )


def _verify(
    hf_dir: Path, model_dir: Path, vocab, logits: bool, sentences, tolerance: float
) -> Dict:
    hub = hub_interface(model_dir / CHECKPOINT_FILE, model_dir, HFConvertError)
    outputs = "masked_lm" if logits else "hidden"
    result = compare_with_hf(hf_dir, hub, vocab.hf_to_fairseq(), sentences, outputs).__dict__
    worst = max(result["hidden_max_abs_diff"], result["logits_max_abs_diff"] or 0.0)
    if worst > tolerance:
        raise HFConvertError(
            f"{hf_dir}: the imported model's outputs differ from HF's: {_describe(result)} > {tolerance}"
        )
    return result


def _describe(check: Dict) -> str:
    text = f"hidden states max |diff| {check['hidden_max_abs_diff']:.2e}"
    if check["logits_max_abs_diff"] is not None:
        text += f", MLM logits max |diff| {check['logits_max_abs_diff']:.2e}"
    return text + f" over {check['tokens']} tokens"


def _verify_pair(dirs, model_dir: Path, vocab, sentences, tolerance: float) -> Dict:
    # the checkpoint's own model: a bio_electra
    hub = hub_interface(model_dir / CHECKPOINT_FILE, model_dir, HFConvertError)
    check = compare_electra_with_hf(dirs, hub, vocab.hf_to_fairseq(), sentences)
    result = {**check.__dict__, "logits_max_abs_diff": check.logits_max_abs_diff}
    if max(result["hidden_max_abs_diff"], result["logits_max_abs_diff"]) > tolerance:
        raise HFConvertError(
            f"{dirs['discriminator']}: the imported model's outputs differ from HF's: {_describe_pair(result)} > "
            f"{tolerance}"
        )
    return result


def _describe_pair(check: Dict) -> str:
    return (
        f"hidden states max |diff| {check['hidden_max_abs_diff']:.2e}, discriminator logits "
        f"{check['discriminator_logits_max_abs_diff']:.2e}, generator MLM logits "
        f"{check['generator_logits_max_abs_diff']:.2e} over {check['tokens']} tokens"
    )
