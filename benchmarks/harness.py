"""What the benchmarks share: where they write, the process runner that records their command lines,
their figures, the bio_roberta they build in-process, and the pretrain -> fine-tune -> predict steps
of an NER measurement through the user-facing tools (``tagging.py``, ``distillation.py`` and
``electra_downstream.py`` run them).

Processes start through ``fairseq_bio.runs`` (``Runner`` adds the command record, the logs and the
wall time). A script imports this module from its own folder: ``sys.path.insert(0, <benchmarks>)``,
then ``import harness``.
"""

import math
import shlex
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from fairseq_bio import runs

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
NER_DATA = REPO.parent / "shared" / "data" / "ner"


# --- processes ---------------------------------------------------------------------------------------------------


class Runner:
    """Runs the tools (``fairseq_bio.runs.capture``), keeps their output under ``<workdir>/logs``
    and records every command line."""

    def __init__(self, workdir: Path, threads: Optional[int]):
        self.logs = workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.commands: List[str] = []
        self.env = (
            {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)} if threads else {}
        )

    def __call__(self, cmd: Sequence, name: str, cwd: Path) -> Tuple[float, str]:
        """(wall seconds, stdout) of ``cmd``; a failure is one line naming the file with its
        output."""
        from fairseq_bio_preprocess.common import PreprocessError

        cmd = [str(c) for c in cmd]
        self.commands.append(
            " ".join([*(f"{k}={v}" for k, v in self.env.items()), shlex.join(cmd)])
        )
        out = self.logs / f"{name}.out"
        start = time.perf_counter()
        done = runs.capture(cmd, cwd=cwd, env=self.env)
        wall = time.perf_counter() - start
        out.write_text(done.stdout + done.stderr, encoding="utf-8")
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise PreprocessError(
                f"{Path(cmd[0]).name} failed (exit {done.returncode}): {last}; its output: {out}"
            )
        return wall, done.stdout


# --- reports and figures -----------------------------------------------------------------------------------------


def pyplot():
    """``matplotlib.pyplot`` for a benchmark's figure: the Agg backend (files only, no display) and
    matplotlib's own logging at WARNING (fairseq's logging setup would let its font search
    through)."""
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path, dpi: int = 110) -> None:
    """``fig`` as a PNG at ``path``, through a temp file and a rename (``fairseq_bio.files``); then
    closed."""
    import matplotlib.pyplot as plt

    from fairseq_bio.files import atomic_path

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format="png")
    plt.close(fig)


def save_report(
    out: Path, results: Dict, text: str, plot: Callable[[Path], None], copies: Path, name: str
) -> None:
    """``out/results.json``, ``.md`` (``text``) and ``.png`` (drawn by ``plot``), copied to
    ``copies/<name>.*``; prints the report."""
    import shutil

    from fairseq_bio.files import write_json, write_text

    write_json(out / "results.json", results, indent=1)
    write_text(out / "results.md", text)
    plot(out / "results.png")
    copies.mkdir(parents=True, exist_ok=True)
    for suffix in ("json", "md", "png"):
        shutil.copyfile(out / f"results.{suffix}", copies / f"{name}.{suffix}")
    print(text + f"\nwrote {out / 'results.md'}, .json, .png (copied to {copies})")


# --- models built in-process -------------------------------------------------------------------------------------


def bio_roberta(task, max_positions: int, **options):
    """A bio_roberta on ``task`` (its dictionary) built from ``BioRobertaConfig`` with ``options``
    (encoder sizes, dropouts) over the config's defaults."""
    from omegaconf import OmegaConf

    from fairseq_bio.models.bio_roberta import BioRobertaConfig, BioRobertaModel

    cfg = OmegaConf.structured(BioRobertaConfig(max_positions=max_positions, **options))
    cfg._name = "bio_roberta"
    return BioRobertaModel.build_model(cfg, task)


# --- the NER measurement's steps ---------------------------------------------------------------------------------


# Encoder sizes: "tiny" is the bio_roberta_tiny config's own (about 3 updates/s on 2 cores, ~5k
# updates in 30 min); "mini" learns something useful within the quick mode's 2 minutes.
SIZES = {
    "tiny": dict(
        encoder_layers=4,
        encoder_embed_dim=256,
        encoder_ffn_embed_dim=1024,
        encoder_attention_heads=4,
    ),
    "mini": dict(
        encoder_layers=2,
        encoder_embed_dim=128,
        encoder_ffn_embed_dim=512,
        encoder_attention_heads=2,
    ),
}
PRETRAIN_LR = {"tiny": 5e-4, "mini": 1e-3}
STARTUP_ALLOWANCE = (
    20.0  # seconds a training process takes to start and stop, when no probe measured it
)
MAX_POSITIONS = (
    128  # the CPU pretraining recipe's (recipe/cpu_demo.yaml); random init gets the same
)


def size_overrides(size: str) -> List[str]:
    return [f"model.{k}={v}" for k, v in SIZES[size].items()]


def last_update(log: Path) -> int:
    """The number of updates a run reached (its last train, train_inner or valid entry in its json
    log)."""
    return max(max(runs.logged(log, kind), default=0) for kind in runs.KINDS)


def intervals(log: Path) -> List[Dict]:
    """The per-interval (train_inner) entries of a json log with fairseq's updates/s, in update
    order."""
    return [e for _, e in sorted(runs.logged(log, "train_inner").items()) if "ups" in e]


def prepare_data(workdir: Path, workers: int, vocab_size: int, max_docs: Optional[int]) -> Path:
    """The demo's pipeline (fetch, extract, byte-level BPE, encode, binarise), reusing finished
    steps (and a demo workdir: --workdir runs/demo)."""
    from fairseq_bio_preprocess.pipeline import build_data_bin, pubmed_sample_inputs

    return build_data_bin(
        pubmed_sample_inputs(),
        workdir,
        vocab_size=vocab_size,
        max_docs_per_file=max_docs,
        workers=workers,
    ).data_bin


def speed_probe(
    run: Runner, config: str, overrides: List[str], updates: int, name: str
) -> Dict[str, float]:
    """``updates`` updates of ``config`` with ``overrides`` (no validation, nothing saved): the
    process's wall seconds, the updates/s over the logged intervals after the first (which holds
    start-up) and that of the fastest one.
    """
    from fairseq_bio_preprocess.common import PreprocessError

    with tempfile.TemporaryDirectory() as tmp:
        log, interval = Path(tmp) / "train.log", max(1, updates // 5)
        cmd = runs.hydra_train(
            config,
            *overrides,
            f"optimization.max_update={updates}",
            "dataset.disable_validation=true",
            "checkpoint.no_save=true",
            f"common.log_interval={interval}",
            save_dir=tmp,
            log=log,
        )
        wall, _ = run(cmd, name, Path(tmp))
        inner = intervals(log)[1:]
    if not inner:
        raise PreprocessError(
            f"the {name} speed probe logged too few updates; raise --probe-updates"
        )
    return {
        "wall": wall,
        "ups": len(inner) / sum(1 / float(e["ups"]) for e in inner),
        "fastest": max(float(e["ups"]) for e in inner),
    }


def pretrain(args, run: Runner, workdir: Path, data_bin: Path) -> Dict:
    """The best encoder ``args.size`` gives within ``args.pretrain_minutes`` (reused when already
    made).

    A short probe measures updates/s; the main run then gets as many updates as fit the budget,
    with fairseq's ``optimization.stop_time_hours`` as the hard stop."""
    from fairseq_bio_preprocess.common import PreprocessError
    from fairseq_bio_preprocess.demo import train_command
    from fairseq_bio_preprocess.pipeline import Steps

    steps = Steps(workdir)
    params = {
        "data": steps.done.get("binarize"),
        "size": args.size,
        "minutes": args.pretrain_minutes,
        "lr": PRETRAIN_LR[args.size],
        "updates": args.pretrain_updates,
        "probe_updates": args.probe_updates,
        "dropout": args.pretrain_dropout,
    }
    record = steps.done.get("bench_pretrain")
    if (
        record
        and record["params"] == params
        and not args.new_encoder
        and Path(record["checkpoint"]).exists()
    ):
        print(
            f"[bench] pretraining: reusing {record['checkpoint']} ({record['updates']} updates)",
            flush=True,
        )
        return record

    budget = 60 * args.pretrain_minutes
    start = time.perf_counter()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    common = [
        *size_overrides(args.size),
        f"optimization.lr=[{PRETRAIN_LR[args.size]}]",
        f"model.dropout={args.pretrain_dropout}",
        f"model.attention_dropout={args.pretrain_dropout}",
    ]
    updates, overhead = args.pretrain_updates, STARTUP_ALLOWANCE
    if (
        updates is None
    ):  # 1. probe: updates/s of this size on this machine now, and the tool's start-up time
        probe = speed_probe(
            run,
            "bio_roberta_tiny",
            [f"task.data={data_bin}", *common],
            args.probe_updates,
            "pretrain-probe",
        )
        ups = probe["ups"]
        overhead = max(0.0, probe["wall"] - args.probe_updates / ups)
        left = budget - (time.perf_counter() - start) - overhead
        # 10 % for validation and checkpoints
        updates = int(0.9 * ups * left)
        print(
            f"[bench] pretraining probe: {ups:.2f} updates/s, start-up {overhead:.0f} s -> {updates} updates",
            flush=True,
        )
    # stop_time_hours stops training at the budget whatever the machine's load does (fairseq counts
    # from start-up)
    left = budget - (time.perf_counter() - start) - overhead
    if updates < 20 or left < 10:
        raise PreprocessError(
            f"{args.pretrain_minutes} min leave {left:.0f} s for {updates} pretraining updates: "
            "raise --pretrain-minutes"
        )

    # 2. the run itself, in a fresh directory (an interrupted one is never resumed: it would break
    #    the budget)
    save_dir = workdir / f"encoder-{args.size}-{stamp}"
    log = save_dir / "train.log"
    save_dir.mkdir(parents=True)
    every = max(100, updates // 10)
    cmd = train_command(
        str(data_bin),
        save_dir,
        log,
        [
            *common,
            f"optimization.max_update={updates}",
            f"lr_scheduler.warmup_updates={max(1, updates // 20)}",
            f"optimization.stop_time_hours={left / 3600:.5f}",
            f"dataset.validate_interval_updates={every}",
            f"checkpoint.save_interval_updates={every}",
        ],
        log_format="json",
        config="bio_roberta_tiny",
    )
    run(cmd, "pretrain", save_dir)
    minutes = (time.perf_counter() - start) / 60
    done = last_update(log)
    valid = runs.last_validation(log) or {}
    checkpoint = save_dir / "checkpoint_best.pt"
    record = {
        "params": params,
        "checkpoint": str(checkpoint),
        "updates": done,
        "planned_updates": updates,
        "minutes": round(minutes, 2),
        "valid_loss": valid.get("loss"),
        "valid_ppl": valid.get("ppl"),
    }
    steps.done["bench_pretrain"] = record
    steps.save()
    print(
        f"[bench] pretrained {done} updates in {minutes:.1f} min, valid ppl {valid.get('ppl')}",
        flush=True,
    )
    return record


def conll_blocks(path: Path) -> List[str]:
    return [b for b in path.read_text(encoding="utf-8").split("\n\n") if b.strip()]


def ner_data(
    dataset: str,
    train_n: Optional[int],
    dev_n: Optional[int],
    tmp: Path,
    test_n: Optional[int] = None,
) -> Path:
    """The dataset's directory (a folder of NER_DATA, or any path), read only; or, with cuts, a new
    directory under ``tmp`` with the first sentences of train/devel/test (a link to the files not
    cut). Nothing is ever written into the dataset."""
    from fairseq_bio_preprocess.common import PreprocessError

    source = (NER_DATA / dataset).resolve()  # an absolute ``dataset`` is taken as it is
    for name in ("train.tsv", "devel.tsv", "test.tsv"):
        if not (source / name).is_file():
            raise PreprocessError(f"{source / name}: not found (NER data: {NER_DATA})")
    if train_n is None and dev_n is None and test_n is None:
        return source
    out = Path(
        tempfile.mkdtemp(dir=tmp, prefix=f"{source.name}-")
    )  # always a new directory of ours
    for name, n in (("train.tsv", train_n), ("devel.tsv", dev_n), ("test.tsv", test_n)):
        if n is None:
            (out / name).symlink_to(source / name)  # the shared data is read, never copied
        else:
            (out / name).write_text(
                "\n\n".join(conll_blocks(source / name)[:n]) + "\n\n", encoding="utf-8"
            )
    return out


def train_throughput(log: Path) -> float:
    """Examples/s of training from a json log's per-update entries, leaving out start-up and the
    updates after validations: examples (``bsz``) over seconds (1 / ``ups``) of each entry, without
    the first update (start-up) and each update that follows a validation (its interval holds
    validation and checkpoint saving)."""
    validated = set(runs.logged(log, "valid"))
    clean = [e for e in intervals(log)[1:] if int(e["num_updates"]) - 1 not in validated]
    return sum(float(e["bsz"]) for e in clean) / sum(1 / float(e["ups"]) for e in clean)


def random_init(size: str) -> List[str]:
    """The fine-tuning overrides of the ``size`` encoder from random initialisation (fairseq's
    default restore_file in a fresh save_dir: nothing is restored)."""
    return [
        "checkpoint.restore_file=checkpoint_last.pt",
        *size_overrides(size),
        f"model.max_positions={MAX_POSITIONS}",
    ]


def fine_tune(
    run: Runner,
    name: str,
    data: Path,
    save_dir: Path,
    init_overrides: List[str],
    args,
    updates: int,
    seed: int,
    vocab: Path,
) -> Dict:
    """One training run of bio_tagging_ner; its updates, wall, train throughput and best dev F1."""
    log = save_dir / "train.log"
    cmd = runs.hydra_train(
        "bio_tagging_ner",
        f"task.data={data}",
        f"task.vocab={vocab}",
        f"common.seed={seed}",
        f"optimization.max_update={updates}",
        "optimization.max_epoch=0",
        f"dataset.batch_size={args.batch_size}",
        f"optimizer.groups.default.lr_float={args.lr}",
        f"optimizer.groups.default.lr_scheduler.warmup_updates={max(1, updates // 10)}",
        "common.log_interval=1",
        *init_overrides,
        save_dir=save_dir,
        log=log,
    )
    wall, _ = run(cmd, name, save_dir)
    return {
        "updates": last_update(log),
        "wall": wall,
        "train_sps": train_throughput(log),
        "dev_f1": max(float(e["f1"]) for e in runs.logged(log, "valid").values() if "f1" in e),
    }


def predict(run: Runner, name: str, checkpoint: Path, test: Path, tmp: Path) -> Dict:
    """Test P/R/F1 printed by fairseq-bio-predict, and its sentences/s net of start-up.

    Sentences/s: test sentences over the wall of ``fairseq-bio-predict`` on the test file (what a
    user waits for). Net of start-up: (test sentences - 1) / (that wall - the wall on its first
    sentence alone), so Python start-up, imports and model loading cancel (nan when machine load
    swamps the difference)."""
    blocks = conll_blocks(test)
    one = tmp / "one.tsv"
    one.write_text(blocks[0] + "\n\n", encoding="utf-8")
    base = runs.command(
        "fairseq-bio-predict", "--checkpoint", checkpoint, "--no-progress", "--overwrite"
    )  # our outputs
    wall_one, _ = run(
        [*base, "--input", one, "--out", tmp / "one.pred.tsv"], f"{name}-predict-one", tmp
    )
    wall, printed = run(
        [*base, "--input", test, "--out", tmp / "test.pred.tsv"], f"{name}-predict", tmp
    )
    line = next(x for x in printed.splitlines() if x.startswith("entity precision"))
    p, r, f1 = (float(line.split()[i]) for i in (2, 4, 6))  # "entity precision P recall R F1 F"
    net = wall - wall_one  # below zero when machine load swamps the difference (short test files)
    return {
        "p": p,
        "r": r,
        "f1": f1,
        "predict_sps": len(blocks) / wall,
        "predict_net_sps": (len(blocks) - 1) / net if net > 0 else math.nan,
        "predict_wall": wall,
        "test_sentences": len(blocks),
    }


def architecture(checkpoint: Path) -> Dict[str, tuple]:
    """Name -> shape of every weight of a checkpoint's model (what "the same architecture" has to
    mean)."""
    from fairseq_bio.checkpoints import load_checkpoint

    return {k: tuple(v.shape) for k, v in load_checkpoint(checkpoint)["model"].items()}


def encoder_parameters(checkpoint: Path) -> int:
    from fairseq_bio.checkpoints import load_checkpoint

    weights = load_checkpoint(checkpoint)["model"]
    return sum(v.numel() for k, v in weights.items() if k.startswith("encoder.sentence_encoder."))
