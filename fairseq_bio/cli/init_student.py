"""fairseq-bio-init-student: a distillation student initialised from a subset of a ``bio_roberta``
teacher's layers (Sanh et al. 2019; DistilBioBERT, Rohanian et al. 2022 sec. 4.1.2): the teacher's
embeddings, the chosen transformer layers in order, its final layer norm and MLM head, written as an
ordinary ``bio_roberta`` checkpoint with the teacher's ``dict.txt`` and ``bpe.json`` beside it."""

import argparse
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from ..errors import BioConfigError
from ..files import check_output
from .options import Parser, add_checkpoint, add_out, add_overwrite, run_cli

LAYER = re.compile(r"^encoder\.sentence_encoder\.layers\.(\d+)\.(.*)$")
EVERY_OTHER = "every-other"


def choose_layers(spec: str, teacher_layers: int) -> List[int]:
    """``every-other`` -> teacher layers 0, 2, 4, ... (0-based, the first kept, as DistilBioBERT's
    script does); ``"0,2,4"`` -> those teacher layers, in that order, as student layers 0, 1, 2."""
    if spec == EVERY_OTHER:
        return list(range(0, teacher_layers, 2))
    try:
        layers = [int(x) for x in spec.split(",")]
    except ValueError:
        raise BioConfigError(
            f'--layers {spec}: "{EVERY_OTHER}" or comma-separated teacher layers (0-based)'
        ) from None
    bad = [x for x in layers if not 0 <= x < teacher_layers]
    if bad:
        raise BioConfigError(
            f"--layers {spec}: teacher layer {bad[0]} is not in 0..{teacher_layers - 1}"
        )
    if len(set(layers)) != len(layers):
        raise BioConfigError(f"--layers {spec}: a teacher layer is named twice")
    return layers


def student_weights(teacher: Dict[str, Any], layers: List[int]) -> Dict[str, Any]:
    """The student's state: every teacher tensor outside the transformer layers (embeddings,
    embedding and final layer norms, MLM head, version buffers), teacher layer ``layers[j]`` as
    student layer ``j``; no classification heads."""
    position = {layer: j for j, layer in enumerate(layers)}
    student = {}
    for key, value in teacher.items():
        match = LAYER.match(key)
        if match:
            if int(match.group(1)) in position:
                student[
                    f"encoder.sentence_encoder.layers.{position[int(match.group(1))]}.{match.group(2)}"
                ] = value
        elif not key.startswith("classification_heads."):
            student[key] = value
    return student


INIT_STUDENT = (
    "fairseq-bio-init-student"  # the script, and what the student checkpoint is recorded as made by
)


def init_student(
    teacher,
    out,
    layers: str = EVERY_OTHER,
    overwrite: bool = False,
    embed_dim: Optional[int] = None,
    ffn_dim: Optional[int] = None,
    heads: Optional[int] = None,
) -> Dict:
    """Write the student of ``teacher`` to ``out`` (temp file, then renamed) and copy the vocabulary
    beside it; returns {"out", "layers", "options", "vocab"}."""
    # Imported here, not above: the command reads its command line without torch or fairseq
    # (preprocess/commands.py).
    from ..encoder_checkpoints import (
        STRUCTURAL_OPTIONS,
        build_model,
        encoder_checkpoint,
        encoder_checkpoint_cfg,
        save_encoder_checkpoint,
    )
    from ..models.bio_roberta import apply_architecture, read_bio_roberta_checkpoint
    from ..tasks.fine_tuning import resolve_vocab

    teacher, out = Path(teacher), Path(out).absolute()
    _, weights, recorded = read_bio_roberta_checkpoint(str(teacher), str(teacher))
    check_output(out, [teacher], overwrite, option="--out", by=INIT_STUDENT)
    name = recorded["_name"]
    model_cfg = argparse.Namespace(**recorded)
    apply_architecture(model_cfg, name)
    for option, wanted, have in (
        ("--embed-dim", embed_dim, model_cfg.encoder_embed_dim),
        ("--ffn-dim", ffn_dim, model_cfg.encoder_ffn_embed_dim),
        ("--heads", heads, model_cfg.encoder_attention_heads),
    ):
        if wanted is not None and wanted != have:
            raise BioConfigError(
                f"{option} {wanted}: the teacher's is {have}; a student initialised from teacher layers copies their "
                "tensors and has the teacher's widths and heads (a narrower student, e.g. TinyBioBERT's, starts "
                "from random initialisation: distill without checkpoint.finetune_from_model)"
            )
    chosen = choose_layers(layers, model_cfg.encoder_layers)
    options = {key: getattr(model_cfg, key) for key in STRUCTURAL_OPTIONS}
    options["encoder_layers"] = len(chosen)
    vocab_dir = resolve_vocab(None, str(teacher))

    student = student_weights(weights, chosen)
    cfg = encoder_checkpoint_cfg(vocab_dir, options, tokens_per_sample=options["max_positions"])
    _, model = build_model(cfg, vocab_dir)
    missing, unexpected = model.load_state_dict(dict(student), strict=False)
    if (
        missing or unexpected
    ):  # a teacher this code does not know (another layout): copy nothing rather than guess
        raise BioConfigError(
            f"{teacher}: its tensors do not fit a bio_roberta student: {sorted(missing or unexpected)[:5]}"
        )
    extra = {"init_student": {"teacher": str(teacher.absolute()), "teacher_layers": chosen}}
    result = encoder_checkpoint(cfg, student, extra)

    save_encoder_checkpoint(result, out, vocab_dir, BioConfigError, by=INIT_STUDENT)
    return {"out": str(out), "layers": chosen, "options": options, "vocab": vocab_dir}


def build_parser() -> Parser:
    parser = Parser(prog=INIT_STUDENT, description=__doc__)
    add_checkpoint(parser, "the teacher: a bio_roberta checkpoint")
    parser.add_argument(
        "--layers",
        default=EVERY_OTHER,
        help=f"{EVERY_OTHER} (teacher layers 0, 2, 4, ...) or comma-separated teacher layers, 0-based, in student "
        "order",
    )
    add_out(parser, "the student checkpoint to write; dict.txt and bpe.json go beside it")
    add_overwrite(parser, "a student")
    parser.add_argument(
        "--embed-dim",
        type=int,
        help="refused unless the teacher's (copied layers keep their width)",
    )
    parser.add_argument("--ffn-dim", type=int, help="refused unless the teacher's")
    parser.add_argument("--heads", type=int, help="refused unless the teacher's")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = build_parser().parse_args(argv)
    from ..encoder_checkpoints import hydra_model_overrides

    info = init_student(
        args.checkpoint,
        args.out,
        args.layers,
        args.overwrite,
        args.embed_dim,
        args.ffn_dim,
        args.heads,
    )
    options, layers = info["options"], ",".join(map(str, info["layers"]))
    print(
        f"wrote {info['out']}: a {options['encoder_layers']} x {options['encoder_embed_dim']} bio_roberta from "
        f"teacher layers {layers} of {args.checkpoint}; vocabulary from {info['vocab']}"
    )
    overrides = " ".join(hydra_model_overrides(options))
    print(f"distill it with checkpoint.finetune_from_model={info['out']} and {overrides}")


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    run_cli(INIT_STUDENT, main, argv)


if __name__ == "__main__":
    cli_main()
