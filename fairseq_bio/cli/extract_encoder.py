"""fairseq-bio-extract-encoder: the discriminator (or generator) of a ``bio_electra`` checkpoint as
a standalone ``bio_roberta`` encoder checkpoint, with the pretraining ``dict.txt`` and ``bpe.json``
beside it, so that every fine-tuning task starts from it like from any other encoder."""

import argparse
import sys
from pathlib import Path
from typing import Dict, Optional, Sequence

from ..errors import BioConfigError
from ..files import check_output
from .options import Parser, add_checkpoint, add_out, add_overwrite, run_cli

PARTS = ("discriminator", "generator")
# bio_roberta's MLM head: the discriminator has none, so a new one is initialised (continued MLM
# pretraining only; fine-tuning never uses it).
LM_HEAD = ("dense.weight", "dense.bias", "layer_norm.weight", "layer_norm.bias", "bias")


# the script, and what the encoder checkpoint is recorded as made by
EXTRACT_ENCODER = "fairseq-bio-extract-encoder"


def best_is_behind(checkpoint: Path, state: Dict) -> Optional[str]:
    """A note when ``checkpoint`` is fairseq's ``checkpoint_best.pt`` and the ``checkpoint_last.pt``
    beside it is further on: fairseq picks ELECTRA's best by the summed validation loss (generator +
    50 x discriminator), which rises while both learn as the generator's replacements get harder to
    detect (docs/electra.md).
    """
    from ..checkpoints import resume_point, updates

    last = checkpoint.with_name("checkpoint_last.pt")
    if checkpoint.name != "checkpoint_best.pt" or not last.is_file():
        return None
    best_at, last_at = updates(state), resume_point(last)
    if best_at is None or last_at is None or last_at <= best_at:
        return None
    return (
        f"{checkpoint} is update {best_at:,}, {last.name} beside it update {last_at:,}: fairseq picks ELECTRA's "
        "best by the summed validation loss, which rises while the generator learns; the trained discriminator "
        f"is in {last.name}"
    )


def extract_encoder(
    checkpoint, out, part: str = "discriminator", overwrite: bool = False, seed: int = 1
) -> Dict:
    """Write ``part`` of the ELECTRA ``checkpoint`` to ``out`` (temp file, then renamed) as a
    ``bio_roberta`` encoder checkpoint and copy its vocabulary beside it; returns {"out", "vocab",
    "options", "lm_head", "note"} (``note``: ``best_is_behind``'s, or None)."""
    # Imported here, not above: the command reads its command line without torch or fairseq
    # (preprocess/commands.py).
    import torch
    from fairseq.models.roberta.model import (
        base_architecture,
    )  # noqa: F401  (fairseq registered before building)

    from ..checkpoints import load_checkpoint
    from ..encoder_checkpoints import (
        build_model,
        encoder_checkpoint,
        encoder_checkpoint_cfg,
        save_encoder_checkpoint,
    )
    from ..models.bio_electra import SHARED, apply_architecture, encoder_options
    from ..models.bio_roberta import is_bio_roberta
    from ..tasks.fine_tuning import resolve_vocab

    checkpoint, out = Path(checkpoint), Path(out).absolute()
    if part not in PARTS:
        raise BioConfigError(f"--part {part}: must be one of {', '.join(PARTS)}")
    if not checkpoint.is_file():
        raise BioConfigError(f"{checkpoint}: no such checkpoint")
    check_output(out, [checkpoint], overwrite, option="--out", by=EXTRACT_ENCODER)
    state = load_checkpoint(checkpoint)
    model_cfg = argparse.Namespace(**((state.get("cfg") or {}).get("model") or {}))
    name = getattr(model_cfg, "_name", None) or ""
    if is_bio_roberta(name):
        raise BioConfigError(
            f"{checkpoint}: model {name}: already a bio_roberta encoder checkpoint; fine-tune, distil or export it as "
            "it is (fairseq-bio-extract-encoder takes bio_electra checkpoints)"
        )
    if not name.startswith("bio_electra") or "discriminator.embed_tokens.weight" not in state.get(
        "model", {}
    ):
        raise BioConfigError(
            f"{checkpoint}: not a bio_electra checkpoint (model {name or 'unknown'})"
        )
    apply_architecture(model_cfg, name)
    options = encoder_options(model_cfg, part)
    if (
        options["encoder_embed_dim"] != model_cfg.embedding_dim
    ):  # the generator; an ELECTRA-small discriminator
        instead = (
            "extract the discriminator, or train with model.generator_embed_dim equal to the embedding width"
            if part == "generator"
            else "export the pair with fairseq-bio-export-hf"
        )
        raise BioConfigError(
            f"{checkpoint}: the {part} is {options['encoder_embed_dim']} wide behind a projection from the "
            f"{model_cfg.embedding_dim}-wide shared embeddings, which bio_roberta cannot hold; {instead}"
        )
    vocab_dir = resolve_vocab(None, str(checkpoint))

    weights = state["model"]
    encoder = {}
    for key, value in weights.items():
        if key.startswith(part + "."):
            encoder["encoder.sentence_encoder." + key[len(part) + 1 :]] = value
    for key in SHARED:  # stored once, under the discriminator
        if "discriminator." + key in weights:
            encoder["encoder.sentence_encoder." + key] = weights["discriminator." + key]
    encoder["encoder.lm_head.weight"] = weights["discriminator.embed_tokens.weight"]
    if part == "generator":
        for key in LM_HEAD:
            encoder["encoder.lm_head." + key] = weights["generator_head." + key]

    cfg = encoder_checkpoint_cfg(vocab_dir, options, tokens_per_sample=options["max_positions"])
    torch.manual_seed(seed)  # the discriminator's new MLM head
    _, model = build_model(cfg, vocab_dir)
    versions = {k: v for k, v in model.state_dict().items() if k.endswith(".version")}
    missing, unexpected = model.load_state_dict({**versions, **encoder}, strict=False)
    allowed = {"encoder.lm_head." + k for k in LM_HEAD} if part == "discriminator" else set()
    if unexpected or set(missing) - allowed:
        raise BioConfigError(
            f"{checkpoint}: the {part} does not fit bio_roberta: {sorted(unexpected or missing)[:5]}"
        )
    lm_head = "generator" if part == "generator" else f"initialised (seed {seed})"
    extra = {
        "electra_extract": {"source": str(checkpoint.absolute()), "part": part, "lm_head": lm_head}
    }
    result = encoder_checkpoint(cfg, model.state_dict(), extra)

    save_encoder_checkpoint(result, out, vocab_dir, BioConfigError, by=EXTRACT_ENCODER)
    return {
        "out": str(out),
        "vocab": vocab_dir,
        "options": options,
        "lm_head": lm_head,
        "note": best_is_behind(checkpoint, state),
    }


def build_parser() -> Parser:
    parser = Parser(prog=EXTRACT_ENCODER, description=__doc__)
    add_checkpoint(parser, "a bio_electra checkpoint (e.g. checkpoint_last.pt)")
    add_out(parser, "the encoder checkpoint to write; dict.txt and bpe.json go beside it")
    parser.add_argument(
        "--part", choices=PARTS, default="discriminator", help="which encoder to extract"
    )
    add_overwrite(parser, "an encoder checkpoint")
    parser.add_argument(
        "--seed", type=int, default=1, help="seed of the discriminator's new MLM head"
    )
    return parser


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = build_parser().parse_args(argv)
    info = extract_encoder(args.checkpoint, args.out, args.part, args.overwrite, args.seed)
    if info["note"]:
        print(f"{EXTRACT_ENCODER}: note: {info['note']}", file=sys.stderr)
    size = f"{info['options']['encoder_layers']} x {info['options']['encoder_embed_dim']}"
    print(
        f"wrote {info['out']}: the {args.part} as a bio_roberta encoder ({size}; MLM head {info['lm_head']}); "
        f"vocabulary from {info['vocab']}"
    )


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    run_cli(EXTRACT_ENCODER, main, argv)


if __name__ == "__main__":
    cli_main()
