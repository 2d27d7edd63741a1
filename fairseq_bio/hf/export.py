"""What ``fairseq-bio-export-hf`` runs: a ``bio_roberta`` checkpoint (masked LM, or fine-tuned with
a token, sentence or span head) as an HF transformers model directory, a ``bio_electra`` checkpoint
as an HF ELECTRA pair.

The directory holds config, weights, the vocabulary's tokenizer and a model card; before it appears,
transformers loads it offline and its tokens, hidden states and logits must equal fairseq's on real
sentences. Which HF class each checkpoint becomes, and how each tokenizer is rebuilt:
docs/hf-interop.md.
"""

import contextlib
from pathlib import Path
from typing import Callable, Dict, Iterator, Optional, Sequence

import torch

from ..checkpoint_fit import find_vocab_dir
from ..checkpoints import checkpoint_section, load_checkpoint
from ..data.pair_format import PairFormat
from ..data.tokenizer_files import require_fastbpe
from ..hub import hub_interface
from ..files import (
    check_destination,
    make_temp_dir,
    no_space,
    remove_temp_dir,
    replace_dir,
    write_json,
)
from .common import DEFAULT_TOLERANCE, HFConvertError
from .config import position_offset, write_config
from .electra import PARTS, electra_pair_from_fairseq
from .heads import ENTITY_REFUSALS, hf_model
from .model_card import electra_model_card, model_card
from .tokenizers import read_fastbpe_codes, write_hf_tokenizer
from .verify import (
    CHECK_PAIRS,
    CHECK_SENTENCES,
    Text,
    compare_electra_with_hf,
    compare_qa_logits,
    compare_with_hf,
    task_ids,
)

EXPORT_HF = (
    "fairseq-bio-export-hf"  # what the output directory is recorded as made by (fairseq_bio.files)
)
MARKERS = ("config.json", "model.safetensors")
ELECTRA_MARKERS = tuple(
    f"{part}/config.json" for part in PARTS
)  # an exported pair: one directory per model


def export_hf(
    checkpoint,
    out_dir,
    *,
    data: Optional[str] = None,
    overwrite: bool = False,
    tolerance: float = DEFAULT_TOLERANCE,
    sentences: Optional[Sequence[Text]] = None,
    head: Optional[str] = None,
    log: Callable[[str], None] = print,
) -> Dict:
    """Export ``checkpoint`` into the HF directory ``out_dir`` (built in a temp dir and renamed only
    once HF's outputs were checked against fairseq's on ``sentences``, default ``CHECK_SENTENCES``,
    and ``CHECK_PAIRS`` for a sentence-level head); ``head`` picks one of several classification
    heads; ``log`` gets one line per warning; returns the check's numbers."""
    from ..models.bio_roberta import is_bio_roberta

    checkpoint, out_dir = Path(checkpoint).absolute(), Path(out_dir).absolute()
    if not checkpoint.is_file():
        raise HFConvertError(f"{checkpoint}: no such checkpoint")
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise HFConvertError(
            "the export checks its output with transformers: pip install transformers"
        ) from None
    state = load_checkpoint(checkpoint)
    model_cfg = checkpoint_section(state, "model")
    model_name = str(model_cfg.get("_name") or model_cfg.get("arch") or "")
    if model_name.startswith("bio_electra"):
        if head is not None:
            raise HFConvertError(
                f"--head {head}: a bio_electra checkpoint has no classification heads"
            )
        return _export_electra(
            checkpoint, state, out_dir, data, overwrite, tolerance, sentences, log
        )
    if not is_bio_roberta(model_name):
        raise HFConvertError(
            f"{checkpoint}: model {model_name!r}: only bio_roberta checkpoints are exported"
        )
    markers = str(checkpoint_section(state, "task").get("entity_representation") or "dummy_cls")
    if (
        markers != "dummy_cls"
    ):  # HF heads pool <s>, and HF's tokenizers know no [E1]: refused, not half-exported
        why = ENTITY_REFUSALS.get(markers, "HF sequence-classification models pool <s> only")
        raise HFConvertError(
            f"{checkpoint}: task.entity_representation={markers}: not exported: {why}; fairseq-bio-predict serves "
            "this checkpoint"
        )
    vocab_dir = find_vocab_dir(checkpoint, state, data, HFConvertError)
    check_destination(out_dir, overwrite, MARKERS, by=EXPORT_HF)
    bpe = _read_bpe(vocab_dir)
    hub = hub_interface(checkpoint, vocab_dir, HFConvertError)
    hf, kind, head_name = hf_model(hub, head)
    encode = task_ids(hub, kind)
    if sentences is None:
        sentences = CHECK_SENTENCES
        if (
            kind == "sequence_classification"
        ):  # the pairs that fit one window of the model's positions
            sentences += tuple(pair for pair in CHECK_PAIRS if encode(pair, fits=True) is not None)
        if kind == "masked_lm" and hub.pair_format.one_separator:  # BERT's pairs: as HF reads them
            sentences += CHECK_PAIRS
        if (
            kind == "question_answering"
        ):  # question-context rows: the pairs (and each sentence asked about itself)
            pairs = CHECK_PAIRS + tuple((s, s) for s in CHECK_SENTENCES)
            sentences = tuple(pair for pair in pairs if encode(pair, fits=True) is not None)

    with _building(out_dir) as tmp:
        max_length = hf.config["max_position_embeddings"] - position_offset(hf.config)
        tokenizer = write_hf_tokenizer(
            tmp, hub.task.source_dictionary, bpe, max_length, hub.pair_format
        )
        hf.config["tokenizer_class"] = tokenizer["class"]
        write_config(hf.config, tmp / "config.json")
        for name, content in hf.side_files.items():
            write_json(tmp / name, content)
        _save_weights(hf.state, tmp)
        identity = torch.arange(len(hub.task.source_dictionary))
        if (
            kind == "question_answering"
        ):  # HF's QA models give start/end logits: the hidden states, then those
            check = compare_with_hf(tmp, hub, identity, sentences, "hidden", None, encode).__dict__
            check["logits_max_abs_diff"] = compare_qa_logits(tmp, hub, head_name, sentences, encode)
        else:
            check = compare_with_hf(tmp, hub, identity, sentences, kind, head_name, encode).__dict__
        if check["logits_max_abs_diff"] > tolerance or check["hidden_max_abs_diff"] > tolerance:
            raise HFConvertError(
                f"{checkpoint}: HF's outputs differ from fairseq's: logits {check['logits_max_abs_diff']:.2e}, hidden "
                f"states {check['hidden_max_abs_diff']:.2e} > {tolerance}"
            )
        model_card(checkpoint, state, hf, kind, tokenizer, check, vocab_dir).save(tmp / "README.md")
        replace_dir(tmp, out_dir, overwrite, MARKERS, by=EXPORT_HF)
    for line in hf.warnings + ([tokenizer["note"]] if tokenizer.get("note") else []):
        log(line)
    return {
        "architecture": hf.config["architectures"][0],
        "tokenizer": tokenizer["class"],
        "kind": kind,
        "head": head_name,
        "files": sorted(p.name for p in out_dir.iterdir()),
        "warnings": hf.warnings,
        **check,
    }


@contextlib.contextmanager
def _building(out_dir: Path) -> Iterator[Path]:
    """A temp directory beside ``out_dir`` to build the export in (the block moves it onto
    ``out_dir``), removed if the block fails; a full disk there is one line naming ``out_dir``,
    whichever writer (json, safetensors, tokenizers, the model card) met it."""
    tmp = None
    try:
        tmp = make_temp_dir(out_dir)
        yield tmp
    except BaseException as e:
        full = no_space(e, out_dir)  # asked before the removal frees the space
        if tmp is not None:
            remove_temp_dir(tmp)  # nothing left once replace_dir moved it
        if full is not None:
            raise full from None
        raise


def _read_bpe(vocab_dir: Path) -> Dict:
    """bpe.json of the vocabulary; fastBPE codes checked (fairseq's fastbpe BPE needs the optional
    fastBPE, which reads the codes unchecked)."""
    from ..data.tokenizer_files import load_bpe_json

    bpe = load_bpe_json(str(vocab_dir / "bpe.json"))
    if bpe["_name"] == "fastbpe":
        require_fastbpe()
        read_fastbpe_codes(bpe["bpe_codes"])
    return bpe


def _save_weights(state: Dict[str, torch.Tensor], directory: Path) -> None:
    from safetensors.torch import save_file

    save_file(
        {k: v.contiguous().clone() for k, v in state.items()},
        str(directory / "model.safetensors"),
        metadata={"format": "pt"},
    )


def _export_electra(
    checkpoint: Path,
    state: Dict,
    out_dir: Path,
    data,
    overwrite: bool,
    tolerance: float,
    sentences: Optional[Sequence[str]],
    log: Callable[[str], None],
) -> Dict:
    """The bio_electra ``checkpoint`` as ``out_dir/discriminator`` (ElectraForPreTraining) and
    ``out_dir/generator`` (ElectraForMaskedLM), checked together before ``out_dir`` appears."""
    if "discriminator.embed_tokens.weight" not in (state.get("model") or {}):
        raise HFConvertError(
            f"{checkpoint}: model 'bio_electra' but no discriminator parameters; not a bio_electra "
            "checkpoint"
        )
    vocab_dir = find_vocab_dir(checkpoint, state, data, HFConvertError)
    check_destination(out_dir, overwrite, ELECTRA_MARKERS, by=EXPORT_HF)
    bpe = _read_bpe(vocab_dir)
    hub = hub_interface(checkpoint, vocab_dir, HFConvertError)
    dictionary = hub.task.source_dictionary
    pair = electra_pair_from_fairseq(hub.model, dictionary)
    sentences = CHECK_SENTENCES if sentences is None else sentences
    with _building(out_dir) as tmp:
        for part, hf in pair.items():
            (tmp / part).mkdir()
            # with token types, pairs as BERT's rows with them (the extracted discriminator's)
            tokenizer = write_hf_tokenizer(
                tmp / part,
                dictionary,
                bpe,
                hf.config["max_position_embeddings"],
                PairFormat(segments=hf.config["type_vocab_size"] > 1),
            )
            hf.config["tokenizer_class"] = tokenizer["class"]
            write_config(hf.config, tmp / part / "config.json")
            _save_weights(hf.state, tmp / part)
        check = compare_electra_with_hf(
            {part: tmp / part for part in PARTS}, hub, torch.arange(len(dictionary)), sentences
        )
        if check.logits_max_abs_diff > tolerance or check.hidden_max_abs_diff > tolerance:
            raise HFConvertError(
                f"{checkpoint}: HF's outputs differ from fairseq's: discriminator logits "
                f"{check.discriminator_logits_max_abs_diff:.2e}, generator logits "
                f"{check.generator_logits_max_abs_diff:.2e}, hidden states {check.hidden_max_abs_diff:.2e} > "
                f"{tolerance}"
            )
        for part, hf in pair.items():
            electra_model_card(checkpoint, state, part, hf, tokenizer, check, vocab_dir).save(
                tmp / part / "README.md"
            )
        replace_dir(tmp, out_dir, overwrite, ELECTRA_MARKERS, by=EXPORT_HF)
    if tokenizer.get("note"):
        log(tokenizer["note"])
    architectures = " + ".join(f"{part}/ {pair[part].config['architectures'][0]}" for part in PARTS)
    return {
        "architecture": architectures,
        "tokenizer": tokenizer["class"],
        "kind": "electra_pair",
        "head": None,
        "files": {part: sorted(p.name for p in (out_dir / part).iterdir()) for part in PARTS},
        "warnings": [],
        "pairs": 0,
        **check.__dict__,
        "logits_max_abs_diff": check.logits_max_abs_diff,
    }
