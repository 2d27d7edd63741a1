"""Each seed paper's headline findings, re-derived here by the existing benchmarks:
``make reproduce``.

A finding (``reproduce_findings.FINDINGS``) names the step that gives our number (``STEPS``: an
existing benchmark or console script, with its budget at each scale). Steps run cheapest first,
each only when its record (``benchmarks/records/reproduce/<step>.json``, tracked, same budget) is
not there yet; an interrupted one starts again. The page is made from the records alone.

    python benchmarks/reproduce.py                       # every finding at the CPU scale
    python benchmarks/reproduce.py --only vocab-terms blurb-arithmetic     # some findings
    python benchmarks/reproduce.py --device cuda         # a GPU: the GPU scale (larger budgets)
    python benchmarks/reproduce.py --from-records        # the page from the records, no runs
    python benchmarks/reproduce.py --check               # fails unless the page is the records'

Writes ``docs/reproduction.md`` and ``docs/reproduction.png``, each through a temp file and a
rename.
"""

import argparse
import json
import os
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from fairseq_bio import runs
from fairseq_bio.files import write_json, write_text

BENCH = Path(__file__).resolve().parent
sys.path.insert(
    0, str(BENCH)
)  # the findings, and the benchmarks whose helpers the steps use (parity_tasks)
from harness import pyplot, save_figure  # noqa: E402
from reproduce_findings import (  # noqa: E402
    CLAIM_WORDS,
    DIRECTION,
    ELECTRA,
    FINDINGS,
    NER_SETS,
    NO_COMPARISON,
    NONE,
    NOT_REPRODUCED,
    REPRODUCED,
    RULE,
    SEED_NAMES,
    SHARED,
    TABLE_2_MODELS,
    TABLE_2_SUMMARY,
    VALUE,
    VERDICTS,
    Row,
    evaluate,
    seed_text,
    table_6,
    table_rows,
)

REPO = BENCH.parent
# each step's record (budget, numbers, commands, time): small tracked JSON, the page's only input
RECORDS = REPO / "benchmarks" / "records" / "reproduce"
WORK = REPO / "runs" / "reproduce"  # the benchmarks' runs
PAGE = REPO / "docs" / "reproduction.md"
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


def run_distill_ner(ctx: Context, params: Dict) -> Dict:
    """``distillation.py --ner`` once per fine-tuning seed (the teacher is pretrained once and
    reused; a seed's table kept by an interrupted run of this step is reused too); each model's test
    entity F1 on NCBI-disease.
    """
    f1: Dict[str, List[float]] = {}
    work = scale_dir(ctx, "distill-ner")
    for seed in params["seeds"]:
        kept = work / f"seed{seed}.md"
        if ctx.call(
            python("distillation.py", *params["args"], "--ner-workdir", work, "--seed", seed),
            f"distill-ner-seed{seed}",
            done=kept,
        ):
            write_text(
                kept,
                (REPO / "benchmarks" / "results" / "distillation_ner.md").read_text(
                    encoding="utf-8"
                ),
            )
        for row in markdown_rows(kept.read_text(encoding="utf-8"), "model"):
            f1.setdefault(row["model"], []).append(float(row["test F1"]))
    return {
        "f1": f1,
        "seeds": params["seeds"],
        "trivial": {"NCBI-disease": trivial_baseline("ncbi-disease")},
    }


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
        "distill-ner",
        "benchmarks/distillation.py --ner: a 4 x 256 teacher pretrained on PubMed, a 2 x 128 student "
        "distilled from it (distill_tinybiobert), both and each one's architecture from random "
        "initialisation fine-tuned on NCBI-disease (one invocation per seed; the teacher is reused)",
        # quick mode (a 400-update teacher), its time caps raised so that a busy machine changes
        # little
        {
            "cpu": {
                "args": [
                    "--ner",
                    "--quick",
                    "--pretrain-minutes",
                    "30",
                    "--distill-updates",
                    "200",
                    "--distill-minutes",
                    "30",
                ],
                "seeds": [1, 2, 3],
            },
            "gpu": {
                "args": ["--ner", "--pretrain-minutes", "10", "--distill-minutes", "15"],
                "seeds": [1, 2, 3],
            },
        },
        run_distill_ner,
        {"cpu": 50, "gpu": 90},
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


def record_path(ctx: Context, step: Step) -> Path:
    return ctx.results / f"{step.name}.json"


def load_record(ctx: Context, step: Step) -> Optional[Dict]:
    """The step's last finished record (at whatever scale), or None."""
    path = record_path(ctx, step)
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def ensure(ctx: Context, step: Step, number: str = "") -> Dict:
    """The step's record at ``ctx.scale``: reused when one with the same budget is there, else the
    step is run."""
    params = step.budgets[ctx.scale]
    record = load_record(ctx, step)
    if record and (record["params"], record["scale"], record.get("on")) == (
        params,
        ctx.scale,
        ctx.device,
    ):
        print(
            f"[reproduce] {number}{step.name}: reusing {display([record_path(ctx, step)])} ({record['date']})",
            flush=True,
        )
        return record
    print(
        f"[reproduce] {number}{step.name}: running (about {step.minutes[ctx.scale]} min at the {ctx.scale} scale)",
        flush=True,
    )
    ctx.commands = []
    start = time.time()
    results = step.run(ctx, params)
    record = {
        "step": step.name,
        "scale": ctx.scale,
        "on": ctx.device,
        "params": params,
        "device": machine(ctx.device),
        "date": time.strftime("%Y-%m-%d"),
        "seconds": round(time.time() - start),
        "commands": ctx.commands,
        "results": results,
    }
    write_json(record_path(ctx, step), record)
    print(f"[reproduce] {number}{step.name}: done in {record['seconds'] / 60:.1f} min", flush=True)
    return record


def machine(device: str) -> str:
    if device == "cuda":
        import torch

        return f"GPU {torch.cuda.get_device_name(0)}"
    return f"CPU, {os.cpu_count()} cores"


# --- the page ------------------------------------------------------------------------------------------------------


TRANSCRIBED = (
    "; its record transcribed"  # a record rebuilt from an earlier page (its note says how)
)


def page(rows: List[Row], png: str) -> str:
    """docs/reproduction.md: the table, the rule, per row its scale, time, source and why, the PNG,
    the commands."""
    runs_of = {r.record["step"]: r.record for r in rows if r.record}
    lines = [
        "# Reproduction: the seed papers' findings, measured here",
        "",
        "Written by `make reproduce` (`python benchmarks/reproduce.py`) from the steps' records in "
        "`benchmarks/records/reproduce/`, which are committed with it; never edited by hand. "
        "`python benchmarks/reproduce.py --check` (run by the test suite) fails when this page is "
        "not what the records give. Each row reuses an existing benchmark or console script at a "
        "budget this machine finishes (the scale per row below); `--scale gpu` (the default on a "
        "CUDA machine) runs larger budgets.",
        "",
        "| seed | finding | paper | ours | verdict |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        f = row.finding
        ours = row.ours.text if row.ours else "not measured"
        lines.append(
            f"| {f.seed} {SEED_NAMES[f.seed]} | {f.finding} | {row.paper.text} | {ours} | **{row.verdict}** |"
        )
    counts = {v: sum(r.verdict == v for r in rows) for v in VERDICTS}
    lines += [
        "",
        "; ".join(f"{n} {v}" for v, n in counts.items()) + f" of {len(rows)}.",
        "",
        RULE,
        "",
        f"![paper vs ours per finding]({png})",
        "",
        "## Per row",
        "",
    ]
    for row in rows:
        f, rec = row.finding, row.record
        ran = (
            (
                f"{rec['scale']} scale ({rec['device']}, {rec['date']}, step `{rec['step']}` took "
                f"{rec['seconds'] / 60:.1f} min{TRANSCRIBED if 'transcribed' in rec else ''})"
            )
            if rec
            else "not run"
        )
        lines.append(f"- **{f.key}** ({f.seed}, {CLAIM_WORDS[f.claim]}): {ran}. Ours: {f.reads}.")
        if f.claim == VALUE:
            lines.append(f"  Tolerance {f.tolerance:.2g}: {f.why}.")
        if f.claim == NONE:
            lines.append(
                f"  Margin ±{f.tolerance:g} {f.unit}: a difference within it is no difference "
                "(fixed; the seeds' spread does not widen it)."
            )
        if row.detail:
            lines.append(f"  Also measured: {row.detail}.")
        if row.verdict == NO_COMPARISON:
            lines += [f"  No comparison: {row.note}.", f"  Why: {f.why}."]
        elif row.verdict != REPRODUCED:
            why = (
                "ours differs from the published number by more than that"
                if f.claim == VALUE
                else f.why
            )
            lines.append(f"  Why: {row.note or why}.")
    lines += [
        "",
        "## Commands",
        "",
        "```",
        "make reproduce                      # = python benchmarks/reproduce.py",
        "python benchmarks/reproduce.py --only KEY ...   # some rows (the keys above)",
        "python benchmarks/reproduce.py --scale gpu      # larger budgets (default with --device cuda)",
        "python benchmarks/reproduce.py --from-records   # this page and its PNG from the records",
        "python benchmarks/reproduce.py --check          # fails unless this page is the records'",
        "```",
        "",
        "What each step ran the last time (paths relative to the repository):",
        "",
    ]
    for step in STEPS:
        rec = runs_of.get(step.name)
        if rec is None:
            continue
        lines += [
            f"- `{step.name}` ({rec['scale']} scale, budget `{json.dumps(rec['params'])}`): {step.what}.",
            "",
        ]
        if "transcribed" in rec:
            lines += [f"  Its record is transcribed: {rec['transcribed']}", ""]
        now = step.budgets.get(rec["scale"])
        if now != rec["params"]:  # what it is described as doing is what it does now
            lines += [
                f"  Its budget has changed since (now `{json.dumps(now)}`): it runs again on the "
                "next `make reproduce`.",
                "",
            ]
        lines += [
            "  ```",
            *(f"  {c}" for c in rec["commands"] or ["(computed in this process)"]),
            "  ```",
            "",
        ]
    return "\n".join(lines).rstrip() + "\n"


VERDICT_COLOURS = {
    REPRODUCED: "tab:green",
    DIRECTION: "tab:olive",
    NOT_REPRODUCED: "tab:red",
    NO_COMPARISON: "tab:gray",
}


def plot(rows: List[Row], path: Path) -> None:
    """One panel per finding: the paper's effect beside ours (with its seeds as dots and its
    spread), the panel's title coloured by the verdict."""
    plt = pyplot()
    columns = 4
    lines = (len(rows) + columns - 1) // columns
    fig, axes = plt.subplots(lines, columns, figsize=(4 * columns, 3.1 * lines), squeeze=False)
    for ax, row in zip(axes.flat, rows):
        ax.bar([0], [row.paper.effect], color="0.6", width=0.6)
        if row.ours is not None:
            err = [row.ours.spread] if row.ours.spread else None
            ax.bar([1], [row.ours.effect], yerr=err, color="tab:blue", width=0.6, capsize=4)
            ax.scatter([1] * len(row.ours.values), row.ours.values, color="black", s=10, zorder=3)
        else:
            ax.text(0.75, 0.5, "not measured", ha="center", transform=ax.transAxes, fontsize=8)
        f = row.finding
        if f.claim == NONE:  # what counts as no difference
            ax.axhspan(-f.tolerance, f.tolerance, color="tab:green", alpha=0.12)
        elif f.claim == VALUE:  # the inputs' rounding
            ax.axhline(f.tolerance, color="tab:green", linestyle="--", linewidth=0.8)
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_xticks([0, 1], ["paper", "ours"])
        ax.set_xlim(-0.7, 1.7)
        ax.set_ylabel(f.unit, fontsize=8)
        ax.set_title(
            f"{f.seed} {f.key}\n{row.verdict} ({CLAIM_WORDS[f.claim]})",
            fontsize=9,
            color=VERDICT_COLOURS[row.verdict],
        )
    for ax in list(axes.flat)[len(rows) :]:
        ax.axis("off")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


def rows_from_records(ctx: Context, failed: Optional[Dict[str, str]] = None) -> List[Row]:
    """Every finding evaluated from its step's record in ``ctx.results``; a step in ``failed``
    (name: why) without a record says so."""
    failed = failed or {}
    rows = [evaluate(f, load_record(ctx, STEP[f.step]) if f.step else None) for f in FINDINGS]
    return [
        (
            replace(r, note=f"its step failed ({failed[r.finding.step]})")
            if r.record is None and r.finding.step in failed
            else r
        )
        for r in rows
    ]


def reproduce(
    ctx: Context, keys: Optional[Sequence[str]], out: Path, run: bool = True
) -> List[Row]:
    """Run the steps the findings ``keys`` (None: all) need, cheapest first (none when not
    ``run``), then write the page ``out`` and its PNG beside it from every step's record. A failing
    step is reported and the others still run; its findings read whatever record it had (without
    one, the page says the step failed)."""
    wanted = [f for f in FINDINGS if keys is None or f.key in keys]
    needed = [s for s in STEPS if any(f.step == s.name for f in wanted)]
    failed: Dict[str, str] = {}
    for number, step in enumerate(needed, 1) if run else ():
        try:
            ensure(ctx, step, f"{number}/{len(needed)} ")
        except (runs.RunError, OSError, KeyError, ValueError, StopIteration) as e:
            failed[step.name] = str(e).splitlines()[0] if str(e) else type(e).__name__
            print(f"[reproduce] {step.name} FAILED: {e}", flush=True)
    rows = rows_from_records(ctx, failed)
    png = out.with_suffix(".png")
    plot(rows, png)
    write_text(out, page(rows, png.name))
    print(
        f"[reproduce] wrote {display([out])} and {display([png])}"
        + (f"; failed: {', '.join(failed)}" if failed else ""),
        flush=True,
    )
    if failed:
        raise SystemExit(
            f"benchmarks/reproduce.py: {len(failed)} step(s) failed: {', '.join(failed)}"
        )
    return rows


def check(ctx: Context, out: Path) -> None:
    """SystemExit (one line, status 1) unless ``out`` is byte for byte the page the records give;
    nothing is run or written."""
    text = page(rows_from_records(ctx), out.with_suffix(".png").name)
    if not out.is_file() or out.read_bytes() != text.encode("utf-8"):
        raise SystemExit(
            f"benchmarks/reproduce.py: {display([out])} is not the page its records give "
            f"({display([ctx.results])}); write it with --from-records"
        )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="KEY",
        choices=[f.key for f in FINDINGS],
        help="findings to run (default: all): " + ", ".join(f.key for f in FINDINGS),
    )
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), help="default: cuda when torch sees a GPU"
    )
    parser.add_argument(
        "--scale",
        choices=("cpu", "gpu"),
        help="budgets (default: gpu with --device cuda, else cpu)",
    )
    records = parser.add_mutually_exclusive_group()
    records.add_argument(
        "--from-records",
        action="store_true",
        help="write the page and its PNG from the steps' records alone (no step runs)",
    )
    records.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if the page differs from the one the records give",
    )
    parser.add_argument(
        "--out", type=Path, default=PAGE, help=f"the page (its PNG beside it; default {PAGE})"
    )
    args = parser.parse_args(argv)
    if args.check or args.from_records:
        ctx = Context()
        if args.check:
            return check(ctx, args.out.resolve())
        reproduce(ctx, None, args.out.resolve(), run=False)
        return
    device = args.device
    if device is None or device == "cuda":
        import torch

        if device == "cuda" and not torch.cuda.is_available():
            parser.error("--device cuda: torch sees no GPU here")
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    ctx = Context(scale=args.scale or ("gpu" if device == "cuda" else "cpu"), device=device)
    signal.signal(
        signal.SIGTERM, lambda *_: sys.exit(143)
    )  # as Ctrl-C: the running benchmark is killed with us
    reproduce(ctx, args.only, args.out.resolve())


if __name__ == "__main__":
    main()
