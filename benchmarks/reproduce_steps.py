"""The steps of ``make reproduce`` (``reproduce.py``): each runs an existing benchmark or console
script at a scale's budget and returns the numbers the findings (``reproduce_findings``) read.

``Context`` says where a step writes and runs; ``STEPS`` lists them, cheapest first, each with its
budget per scale and about how long it takes.
"""

import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from fairseq_bio import runs
from fairseq_bio.files import write_text

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))  # the findings, and the benchmarks whose helpers the steps use
from reproduce_findings import (  # noqa: E402
    ELECTRA,
    NER_SETS,
    SHARED,
    TABLE_2_MODELS,
    TABLE_2_SUMMARY,
    seed_text,
    table_6,
    table_rows,
)

REPO = BENCH.parent
# each step's record (budget, numbers, commands, time): small tracked JSON, the page's only input
RECORDS = REPO / "benchmarks" / "records" / "reproduce"
WORK = REPO / "runs" / "reproduce"  # the benchmarks' runs
PROGRESS_SECONDS = 60  # how often a running step's last output line is shown

# --- steps ---------------------------------------------------------------------------------------------------------


@dataclass
class Context:
    """Where steps write and read, the scale and device they run at, and the commands the running
    step ran."""

    scale: str = "cpu"
    device: str = "cpu"
    results: Path = RECORDS
    work: Path = WORK
    commands: List[str] = field(default_factory=list)

    def call(self, argv: Sequence, name: str, done: Optional[Path] = None) -> bool:
        """Run ``argv`` to its end, its output in ``<work>/logs/<name>.out``; every PROGRESS_SECONDS
        its elapsed time and last output line; a ``runs.RunError`` with the output's tail if it
        fails. Interrupted, it is killed with its children. Skipped (False) when ``done`` exists:
        that output is kept from an earlier run.
        """
        argv = [str(a) for a in argv]
        shown = display(argv)
        if done is not None and done.exists():
            self.commands.append(f"{shown}  # reused: {display([done])}")
            return False
        self.commands.append(shown)
        log = self.work / "logs" / f"{name}.out"
        log.unlink(missing_ok=True)  # runs.Run appends: this run's output only
        print(f"[reproduce] $ {shown}\n[reproduce]   its output: {display([log])}", flush=True)

        def progress(run: runs.Run) -> None:
            lines = run.output().strip().splitlines() or [""]
            minutes = (time.time() - run.started) / 60
            print(f"[reproduce]   {name}: {minutes:.0f} min: {lines[-1][:150]}", flush=True)

        # a RunError with the output's tail unless it exits 0; interrupted, it is killed with its
        # process group
        runs.Run(argv, log, cwd=REPO, session=True).check(progress=progress, every=PROGRESS_SECONDS)
        return True


def display(argv: Sequence) -> str:
    """A command line as the page shows it: paths relative to the repository (the shared data as
    ``../shared``, the home directory as ``~``), this interpreter as ``python``."""
    parts = ["python" if str(a) == sys.executable else str(a) for a in argv]
    text = " ".join(f'"{p}"' if " " in p else p for p in parts)
    for path, shown in (
        (f"{REPO}/", ""),
        (str(REPO), "."),
        (str(SHARED), "../shared"),
        (str(Path.home()), "~"),
    ):
        text = text.replace(path, shown)
    return text


def scale_dir(ctx: "Context", name: str) -> Path:
    """A step's runs: ``<work>/<name>`` at the CPU scale, ``<work>/<name>-gpu`` at the GPU scale (a
    benchmark resuming one scale's runs at the other's budget would mix them)."""
    return ctx.work / (name if ctx.scale == "cpu" else f"{name}-{ctx.scale}")


def python(script: str, *args) -> list:
    """``python benchmarks/<script> args`` with this interpreter."""
    return [sys.executable, BENCH / script, *args]


# The NER and relation sets in ../shared/data: fairseq-bio-blurb's name -> folder
TASK_DATA = {
    "ncbi-disease": "ner/NCBI-disease",
    "bc5-disease": "ner/BC5CDR-disease",
    "gad": "re/GAD",
    "ddi": "re/DDI",
}


def trivial_baseline(task: str) -> float:
    """The test score of the trivial answer on ``task`` (a TASK_DATA name): all-O tagging for NER
    (entity F1), the majority training label for every test example for relations (micro F1 over
    the positive classes), x 100."""
    from fairseq_bio.data.conll import read_conll
    from fairseq_bio.data.sentence_files import read_jsonl, read_tsv
    from fairseq_bio.metrics.classification import micro_f1
    from fairseq_bio.metrics.tagging import span_prf

    folder = SHARED / "data" / TASK_DATA[task]
    if folder.parent.name == "ner":
        gold = [s.tags for s in read_conll(folder / "test.tsv")]
        return 100 * span_prf(gold, [["O"] * len(tags) for tags in gold])[2]
    if (folder / "train.json").exists():
        train, test = (
            read_jsonl(folder / f"{n}.json", ["sentence"], "label") for n in ("train", "test")
        )
    else:
        train, test = (
            read_tsv(folder / f"{n}.tsv", ["sentence"], "label") for n in ("train", "test")
        )
    majority = Counter(e.label for e in train).most_common(1)[0][0]
    return 100 * micro_f1([e.label for e in test], [majority] * len(test))


@dataclass(frozen=True)
class Step:
    """What gives ours: ``run(ctx, params)`` runs an existing benchmark (or console scripts) with
    ``params``, the budget of a scale (``budgets``; also what a finished record must match to be
    reused), and returns the numbers the findings read. ``minutes``: about how long a fresh run
    takes at each scale on this project's machines.
    """

    name: str
    what: str
    budgets: Dict[str, Dict]
    run: Callable[[Context, Dict], Dict]
    minutes: Dict[str, int]


def run_blurb_table_6(ctx: Context, params: Dict) -> Dict:
    """Every Table 6 column's BLURB score computed from its 13 per-dataset numbers beside the
    published one."""
    from fairseq_bio.runner.datasets import blurb_score

    columns = {}
    for model, column in table_6().items():
        published = column.pop("BLURB score")
        columns[model] = {"published": published, "computed": blurb_score(column).score}
    return {"columns": columns}


def run_biolm_table_2(ctx: Context, params: Dict) -> Dict:
    """Table 2's five summary rows of every model computed from its 18 per-task numbers beside the
    published ones."""
    from fairseq_bio.runner.datasets import BIOLM

    rows = table_rows(
        seed_text("000"), "BC5CDR-C. 87.3", "Table 2: Test results", len(TABLE_2_MODELS)
    )
    cells = {}
    for i, model in enumerate(TABLE_2_MODELS):
        score = BIOLM.score(
            {name: values[i] for name, values in rows.items() if name not in TABLE_2_SUMMARY}
        )
        for row, (kind, key) in TABLE_2_SUMMARY.items():
            computed = score.score if kind == "score" else getattr(score, kind)[key]
            cells[f"{model} {row}"] = {"published": rows[row][i], "computed": computed}
    return {"cells": cells}


# The vocabularies measured: BERT's general one (MiniLM's uncased WordPiece) and the seed papers'
# presets learned from the PubMed sample (fairseq-bio-vocab --preset).
VOCAB_PRESETS = ("pubmedbert", "biomegatron-30k", "biomegatron-50k")


def run_vocab(ctx: Context, params: Dict) -> Dict:
    """The PubMed sample extracted, each preset's vocabulary learned from it, and
    ``fairseq-bio-vocab-report`` of them and MiniLM's on the NER training sets (each sub-step
    skipped when its output is there)."""
    from fairseq_bio_preprocess.pipeline import pubmed_sample_inputs
    from parity_tasks import minilm_dir

    work = ctx.work / "vocab"
    corpus = work / "corpus"
    # extract and vocab write their folders whole, by a rename: a folder there is a finished one
    ctx.call(
        runs.command(
            "fairseq-bio-extract",
            *pubmed_sample_inputs(),
            "--out",
            corpus,
            "--workers",
            "2",
            "--no-progress",
            "--overwrite",
        ),
        "vocab-extract",
        done=corpus / "extract_stats.json",
    )
    vocabs = [f"MiniLM={minilm_dir()}"]
    for preset in params["presets"]:
        ctx.call(
            runs.command(
                "fairseq-bio-vocab",
                "--input",
                corpus / "train.txt",
                "--out",
                work / preset,
                "--preset",
                preset,
                "--overwrite",
            ),
            f"vocab-{preset}",
            done=work / preset / "vocab_info.json",
        )
        vocabs.append(f"{preset}={work / preset}")
    ctx.call(
        runs.command(
            "fairseq-bio-vocab-report",
            *(a for v in vocabs for a in ("--vocab", v)),
            "--data",
            *(SHARED / "data" / "ner" / d for d in params["data"]),
            "--out",
            work / "report",
            "--overwrite",
        ),
        "vocab-report",
    )
    report = json.loads((work / "report" / "vocab_report.json").read_text(encoding="utf-8"))
    return {
        "break_out": {
            f"{r['vocabulary']} {r['dataset']}": r["subtokens_per_entity_word"]
            for r in report["results"]
        },
        "whole": {
            name: round(share * len(report["terms"]["terms"]))
            for name, share in report["terms"]["coverage"].items()
        },
        "terms": len(report["terms"]["terms"]),
        "sizes": {v["name"]: v["size"] for v in report["vocabularies"]},
    }


def markdown_rows(text: str, first_column: str) -> List[Dict[str, str]]:
    """The rows of the markdown table whose header starts with ``| <first_column> |``, as {header:
    cell}."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_column} |"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, (c.strip() for c in line.strip("|").split("|")))))
    return rows


def run_distill_speed(ctx: Context, params: Dict) -> Dict:
    """``distillation.py`` (a) and (b) ``repeats`` times; each model's inference speed-up over the
    teacher."""
    speedups: Dict[str, List[float]] = {}
    for repeat in range(1, params["repeats"] + 1):
        device = ["--device", "cuda"] if ctx.device == "cuda" else []
        ctx.call(python("distillation.py", *params["args"], *device), f"distill-speed-{repeat}")
        text = (REPO / "benchmarks" / "results" / "distillation.md").read_text(encoding="utf-8")
        write_text(scale_dir(ctx, "distill-speed") / f"repeat{repeat}.md", text)
        for row in markdown_rows(text, "model"):
            speedups.setdefault(row["model"], []).append(float(row["speed-up"].rstrip("x")))
    return {"speedup": speedups}


def run_variants(ctx: Context, params: Dict) -> Dict:
    """``finetune_variants.py`` on the variants named (each dataset's reference with them), each
    also on MiniLM's architecture from random init when ``random_init``; per variant its test
    scores by seed, their differences to the reference paired by seed, the random-init run's
    scores by seed and the dataset's trivial baseline."""
    out = scale_dir(ctx, "variants")
    ctx.call(
        python(
            "finetune_variants.py",
            "--variants",
            ",".join(params["variants"]),
            "--seeds",
            params["seeds"],
            *(["--random-init"] if params.get("random_init") else []),
            "--out",
            out,
            "--results",
            out,
        ),
        "variants",
    )
    rows = json.loads((out / "results.json").read_text(encoding="utf-8"))["rows"]
    return {
        f"{r['dataset']}:{r['variant']}": {
            "values": r["values"],
            "seeds": r["seeds"],
            "diffs": r.get("diffs"),
            "random": (r.get("random") or {}).get("values"),
            "dev_curve": r.get("dev_curve"),  # has the budget converged: mean dev per validation
            "trivial": trivial_baseline(r["dataset"]),
        }
        for r in rows
    }


def run_dapt(ctx: Context, params: Dict) -> Dict:
    """``domain_adaptation.py``: MiniLM continued on PubMed for ``updates``, fine-tuned at 0 and at
    the end; per dataset the gains paired by seed and the scores."""
    out = scale_dir(ctx, "dapt")
    ctx.call(
        python(
            "domain_adaptation.py",
            "--out",
            out,
            "--updates",
            params["updates"],
            "--at",
            "0,full",
            "--seeds",
            params["seeds"],
            "--tasks",
            params["tasks"],
            *(["--random-init"] if params.get("random_init") else []),
            "--results",
            out,
        ),
        "dapt",
    )
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    at = str(params["updates"])
    return {
        row["dataset"]: {
            "gains": row["seed_gains"][at],
            "scores": row["scores"]["0"]["values"],
            "continued": row["scores"][at]["values"],
            "random": (row.get("random") or {}).get("values"),
            "trivial": (
                trivial_baseline(row["dataset"].lower())
                if row["dataset"].lower() in TASK_DATA
                else None
            ),
        }
        for row in results["rows"]
    }


def run_distill_minilm(ctx: Context, params: Dict) -> Dict:
    """``distill_minilm.py``: MiniLM's students by preset, fine-tuned on
    NCBI-disease with MiniLM, and each architecture from random init, with the same seeds (the
    benchmark reuses its finished pieces); per model its test F1 by seed, the students'
    distillation updates and each architecture's inference tokens/s."""
    work = scale_dir(ctx, "distill-minilm")
    ctx.call(
        python(
            "distill_minilm.py",
            *params["args"],
            *(["--device", "cuda"] if ctx.device == "cuda" else []),
            "--seeds",
            params["seeds"],
            "--ner-workdir",
            work,
            "--results",
            work,
        ),
        "distill-minilm",
    )
    results = json.loads((work / "results.json").read_text(encoding="utf-8"))
    return {
        "f1": results["f1"],
        "seeds": results["seeds"],
        "shapes": results["shapes"],
        "labels": results["labels"],
        "random_of": results["random_of"],
        "distill": {
            k: {"updates": d["updates"], "minutes": d["minutes"]}
            for k, d in results["distill"].items()
        },
        "speed": {k: round(v["tokens_per_s"], 1) for k, v in results["speed"].items()},
        "head": results["head"],
        "trivial": {"NCBI-disease": trivial_baseline("ncbi-disease")},
    }


def run_electra_downstream(ctx: Context, params: Dict) -> Dict:
    """``electra_downstream.py``: a tiny ELECTRA and a masked LM of its discriminator's size, each
    pretrained for the same minutes, fine-tuned on NCBI-disease per seed beside the same
    architecture from random init (the benchmark reuses its finished pieces); per encoder its test
    F1 by seed and its pretraining updates, and the discriminator's last validation (replaced
    recall, mean P(replaced) on replaced and on original tokens)."""
    work = scale_dir(ctx, "electra-downstream")
    ctx.call(
        python(
            "electra_downstream.py",
            *params["args"],
            "--seeds",
            *params["seeds"],
            "--workdir",
            work,
            "--results",
            work,
        ),
        "electra-downstream",
    )
    results = json.loads((work / "results.json").read_text(encoding="utf-8"))
    budget = (
        results["meta"]["budget"] if results["plan"]["ups"] else None
    )  # None: --pretrain-updates, equal updates
    return {
        "f1": results["f1"],
        "seeds": results["seeds"],
        "minutes": budget,
        "updates": {model: p["updates"] for model, p in results["pretrain"].items()},
        "planned": {model: p["planned"] for model, p in results["pretrain"].items()},
        "discriminator": {
            k: results["pretrain"][ELECTRA]["valid"].get(k)
            for k in ("replaced_recall", "replaced_prob", "original_prob")
        },
        "trivial": {"NCBI-disease": trivial_baseline("ncbi-disease")},
    }


STEPS = [
    Step(
        "blurb-table-6",
        "fairseq_bio.runner.datasets.blurb_score on seed 001's Table 6 (read from the paper's text)",
        {"cpu": {}, "gpu": {}},
        run_blurb_table_6,
        {"cpu": 0, "gpu": 0},
    ),
    Step(
        "biolm-table-2",
        "fairseq_bio.runner.datasets.BIOLM.score on seed 000's Table 2 (read from the paper's text)",
        {"cpu": {}, "gpu": {}},
        run_biolm_table_2,
        {"cpu": 0, "gpu": 0},
    ),
    Step(
        "vocab",
        "fairseq-bio-extract of the PubMed sample, fairseq-bio-vocab --preset (pubmedbert, biomegatron-30k, "
        "biomegatron-50k), fairseq-bio-vocab-report with MiniLM's vocabulary on the NER training sets",
        {s: {"presets": list(VOCAB_PRESETS), "data": list(NER_SETS)} for s in ("cpu", "gpu")},
        run_vocab,
        {"cpu": 15, "gpu": 15},
    ),
    Step(
        "distill-speed",
        "benchmarks/distillation.py (a) and (b): inference tokens/s of the 12 x 768 teacher and "
        "the 6 x 768 and 4 x 312 students at batch 32 x 128, random weights",
        {
            "cpu": {
                "args": ["--sizes", "paper", "--steps", "3", "--step-batch", "8"],
                "repeats": 2,
            },
            "gpu": {"args": ["--sizes", "paper", "--steps", "10"], "repeats": 3},
        },
        run_distill_speed,
        {"cpu": 10, "gpu": 3},
    ),
    Step(
        "electra-downstream",
        "benchmarks/electra_downstream.py: a tiny ELECTRA (bio_electra_tiny: 4 x 256 "
        "discriminator, 64-wide generator) and a 4 x 256 masked-LM bio_roberta, each pretrained on the PubMed sample "
        "for the same wall-clock minutes (on the CPU: the tiny configs' recipe), the discriminator extracted by "
        "fairseq-bio-extract-encoder, both fine-tuned on NCBI-disease with the same updates and seeds",
        # cpu: 10 + 10 min of pretraining, 9 fine-tunings of 188 updates, the data prepared from
        # 3,000 abstracts a file
        {
            "cpu": {
                "args": [
                    "--pretrain-minutes",
                    "10",
                    "--max-docs-per-file",
                    "3000",
                    "--train-sentences",
                    "1000",
                    "--dev-sentences",
                    "300",
                    "--epochs",
                    "3",
                    "--batch-size",
                    "16",
                ],
                "seeds": [1, 2, 3],
            },
            "gpu": {"args": ["--pretrain-minutes", "30", "--epochs", "3"], "seeds": [1, 2, 3]},
        },
        run_electra_downstream,
        {"cpu": 40, "gpu": 90},
    ),
    Step(
        "distill-minilm",
        "benchmarks/distill_minilm.py: MiniLM-L6-H384 (its MLM head fitted, "
        "encoder frozen) distilled into 3 x 384 students from its every other layer (DistilBioBERT, "
        "CompactBioBERT and bio-lm's presets) and a 3 x 192 TinyBioBERT-style student from random "
        "init on the PubMed sample for the same updates; teacher, students and each architecture "
        "from random init fine-tuned on NCBI-disease by fairseq-bio-blurb with the same seeds; "
        "inference tokens/s of each architecture",
        # cpu: 100 head updates, 4 x 200 distillation updates, 24 fine-tunings of 2 epochs
        {
            "cpu": {
                "args": [
                    "--head-updates",
                    "100",
                    "--distill-updates",
                    "200",
                    "--distill-minutes",
                    "30",
                ],
                "seeds": 3,
            },
            "gpu": {
                "args": [
                    "--head-updates",
                    "500",
                    "--distill-updates",
                    "2000",
                    "--distill-minutes",
                    "30",
                ],
                "seeds": 3,
            },
        },
        run_distill_minilm,
        {"cpu": 110, "gpu": 60},
    ),
    Step(
        "variants",
        "benchmarks/finetune_variants.py: MiniLM fine-tuned by fairseq-bio-blurb on BC5-disease (linear "
        "vs BiLSTM head) and DDI (dummified [CLS] vs entity markers + entity start), and MiniLM's "
        "architecture from random init the same way, benchmarks/blurb_scores.py's CPU budgets, on "
        "the CPU at either scale",
        {
            "cpu": {
                "variants": ["bc5-disease:bilstm", "ddi:marker_start"],
                "seeds": 3,
                "random_init": True,
            },
            "gpu": {
                "variants": ["bc5-disease:bilstm", "ddi:marker_start"],
                "seeds": 3,
                "random_init": True,
            },
        },
        run_variants,
        {"cpu": 240, "gpu": 240},
    ),
    Step(
        "dapt",
        "benchmarks/domain_adaptation.py: MiniLM continued on the PubMed sample (masked LM), fine-tuned by "
        "fairseq-bio-blurb before and after on the tasks its budget names, beside MiniLM's "
        "architecture from random init fine-tuned alike",
        {
            "cpu": {"updates": 400, "seeds": 3, "tasks": ",".join(TASK_DATA), "random_init": True},
            "gpu": {
                "updates": 1000,
                "seeds": 3,
                "tasks": ",".join(TASK_DATA),
                "random_init": True,
            },
        },
        run_dapt,
        {"cpu": 650, "gpu": 150},
    ),
]
STEP = {s.name: s for s in STEPS}
