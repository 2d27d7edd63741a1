"""The seed papers' headline findings that ``benchmarks/reproduce.py`` re-derives, judged by the
rule of ``reproduce_rule``.

Each ``Finding`` names its seed, what the paper found, ``paper()`` its number (read from the
paper's text in ``../shared/seeds``, from the tables ``fairseq-bio-vocab-report`` ships, or written
in the finding with its table), the step of ``reproduce.py`` whose results give ours and
``ours(results)`` how, the kind of claim (``VALUE``: the paper's own arithmetic; ``SIGN``: a
difference; ``NONE``: no substantial difference) and why it may not reproduce at this scale.
``reproduce_rule.evaluate`` judges a finding against its step's record.
"""

import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

from fairseq_bio.metrics.benchmark_scores import SEQUENCE_LABELLING, TEXT_CLASSIFICATION
from reproduce_rule import (
    NO_DIFFERENCE,
    NONE,
    SIGN,
    VALUE,
    Measure,
    Side,
    differences,
    side,
    spread_of,
)

SHARED = (
    Path(__file__).resolve().parent.parent.parent / "shared"
)  # the seed papers' text, the task data
SEED_NAMES = {
    "000": "bio-lm",
    "001": "PubMedBERT",
    "002": "BioMegatron",
    "003": "BioELECTRA",
    "004": "compact",
}


# --- the papers' text -----------------------------------------------------------------------------------------------


def seed_text(number: str) -> str:
    """The text of seed paper ``number`` (``../shared/seeds/<number>_*.txt``)."""
    found = sorted((SHARED / "seeds").glob(f"{number}_*.txt"))
    if not found:
        raise FileNotFoundError(f"{SHARED / 'seeds'}: no seed {number} text")
    return found[0].read_text(encoding="utf-8")


def table_rows(text: str, start: str, end: str, width: int) -> Dict[str, List[float]]:
    """{row name: numbers} of a table in a paper's text: the lines from the one starting with
    ``start`` up to ``end``, each a name followed by ``width`` decimal numbers."""
    block = text[text.index(start) : text.index(end)]
    rows = {}
    for line in block.splitlines():
        parts = line.split()
        if len(parts) > width and all(re.fullmatch(r"\d+\.\d+", p) for p in parts[-width:]):
            rows[" ".join(parts[:-width])] = [float(p) for p in parts[-width:]]
    return rows


TABLE_6_MODELS = [
    "BERT-uncased",
    "BERT-cased",
    "RoBERTa",
    "BioBERT",
    "SciBERT-uncased",
    "SciBERT-cased",
    "ClinicalBERT",
    "BlueBERT",
    "PubMedBERT",
]
TABLE_2_MODELS = [
    "RoBERTa-base",
    "SciBERT",
    "BioBERT",
    "ClinicalBERT",
    "BioMed-RoBERTa",
    "Ours-base",
    "RoBERTa-large",
    "Ours-large",
]
# Table 2's summary rows: where a BenchmarkScore keeps each
TABLE_2_SUMMARY = {
    "Mean (Seq. Lab.)": ("per_type", SEQUENCE_LABELLING),
    "Mean (Classif.)": ("per_type", TEXT_CLASSIFICATION),
    "Mean (PubMed)": ("per_domain", "pubmed"),
    "Mean (Clinical)": ("per_domain", "clinical"),
    "Mean (all)": ("score", None),
}


def table_6() -> Dict[str, Dict[str, float]]:
    """Seed 001 (PubMedBERT) Table 6 from its text: {model: {dataset: test score, "BLURB score":
    ...}}."""
    rows = table_rows(seed_text("001"), "BC5-chem\t", "Table 6.", len(TABLE_6_MODELS))
    return {
        m: {name: values[i] for name, values in rows.items()} for i, m in enumerate(TABLE_6_MODELS)
    }


VOCAB_LABELS = {
    "MiniLM": "MiniLM (BERT's uncased)",
    "pubmedbert": "PubMed WordPiece 30k",
    "biomegatron-30k": "PubMed SentencePiece 30k",
    "biomegatron-50k": "PubMed SentencePiece 50k",
}
NER_SETS = ("NCBI-disease", "BC5CDR-disease")

# distill_minilm.py's models: MiniLM, its architecture from
# random init, and the students by preset, each with its architecture from random init (random_of)
TEACHER, TEACHER_RANDOM = "teacher", "teacher architecture, random init"
BIOLM_STUDENT, TINY_STUDENT = "biolm", "tinybiobert"
ELECTRA, MLM, RANDOM_INIT = (
    "electra",
    "mlm",
    "random",
)  # electra_downstream.py's encoders and its random init


# --- findings ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One headline finding of a seed paper: ``paper()`` its number, ``ours(results)`` ours from
    ``step``'s results (None: nothing here measures it), the ``claim`` the verdict tests (with
    ``tolerance``: the rounding of a value, the fixed margin of no difference), ``reads`` which
    number of the step that is, ``why`` it may not reproduce at this scale (shown unless it
    reproduced), ``unit`` the plot's. A modelling row names its ``sides(results)`` for ``guard``;
    ``detail(results)`` is more of what the step measured, shown under the row.
    """

    key: str
    seed: str
    finding: str
    claim: str
    paper: Callable[[], Measure]
    step: Optional[str]
    ours: Optional[Callable[[Dict], Measure]]
    reads: str
    why: str
    tolerance: float = 0.0
    unit: str = ""
    sides: Optional[Callable[[Dict], List[Side]]] = None
    detail: Optional[Callable[[Dict], str]] = None


def _published_break_out(vocabulary: str, dataset: str) -> float:
    from fairseq_bio_preprocess.vocab_report import _published_break_out as published

    return published()[vocabulary][dataset]


def _table_1_whole(column: str) -> int:
    from fairseq_bio_preprocess.vocab_report import DEFAULT_TERMS, read_terms

    return sum(t["published"][column] for t in read_terms(DEFAULT_TERMS)[0])


def _break_out(general: str, domain: str, general_name: str, domain_name: str):
    def paper() -> Measure:
        before, after = (_published_break_out(v, "BC5CDR-disease") for v in (general, domain))
        return Measure(
            after - before,
            f"BC5CDR-disease: {general} {before:.3f} → {domain} {after:.3f} "
            f"(**{after - before:+.3f}**)",
        )

    def ours(results: Dict) -> Measure:
        rate = {
            v: {d: results["break_out"][f"{v} {d}"] for d in NER_SETS}
            for v in (general_name, domain_name)
        }
        before, after = rate[general_name]["BC5CDR-disease"], rate[domain_name]["BC5CDR-disease"]
        ncbi = rate[domain_name]["NCBI-disease"] - rate[general_name]["NCBI-disease"]
        return Measure(
            after - before,
            f"BC5CDR-disease: {VOCAB_LABELS[general_name]} {before:.3f} → "
            f"{VOCAB_LABELS[domain_name]} {after:.3f} (**{after - before:+.3f}**); NCBI-disease "
            f"{ncbi:+.3f}",
            0.0,
        )

    return paper, ours


def _terms_paper() -> Measure:
    bert, pubmedbert = _table_1_whole("BERT"), _table_1_whole("PubMedBERT")
    return Measure(
        pubmedbert - bert,
        f"Table 1's 17 terms whole: BERT {bert} → PubMedBERT {pubmedbert} "
        f"(**{pubmedbert - bert:+d}**)",
    )


def _terms_ours(results: Dict) -> Measure:
    general, domain = results["whole"]["MiniLM"], results["whole"]["pubmedbert"]
    return Measure(
        domain - general,
        f"{VOCAB_LABELS['MiniLM']} {general} → {VOCAB_LABELS['pubmedbert']} {domain} "
        f"of {results['terms']} (**{domain - general:+d}**)",
        0.0,
    )


def _arithmetic(cells: str, example: str, digits: int, published: str):
    """Paper and ours of an arithmetic finding: the largest |computed - published| over ``cells`` of
    the step's results (the paper's: 0); the table shows ``published`` and ``example``'s computed
    number."""

    def paper() -> Measure:
        return Measure(0.0, published)

    def ours(results: Dict) -> Measure:
        worst = max(abs(c["computed"] - c["published"]) for c in results[cells].values())
        e = results[cells][example]
        return Measure(
            worst,
            f"{example} {e['computed']:.{digits + 2}f} (published {e['published']:.{digits}f}); "
            f"largest gap over all {len(results[cells])}: **{worst:.{digits + 2}f}**",
            0.0,
        )

    return paper, ours


# BioELECTRA (P)'s BLURB numbers, seed 003 Table 2's last column (its text lists them column by
# column, so they are transcribed here rather than parsed), with the published BLURB score.
BIOELECTRA = {
    "BC5-chem": 93.60,
    "BC5-disease": 85.84,
    "NCBI-disease": 89.38,
    "BC2GM": 84.69,
    "JNLPBA": 80.17,
    "EBM PICO": 74.26,
    "ChemProt": 78.20,
    "DDI": 82.76,
    "GAD": 83.70,
    "BIOSSES": 92.49,
    "HoC": 83.50,
    "PubMedQA": 64.02,
    "BioASQ": 88.57,
}
BIOELECTRA_BLURB = 82.47


def _bioelectra_paper() -> Measure:
    return Measure(
        0.0, f"Table 2: BioELECTRA (P)'s BLURB score {BIOELECTRA_BLURB:.2f} from its 13 numbers"
    )


def _bioelectra_ours(results: Dict) -> Measure:
    from fairseq_bio.runner.datasets import blurb_score

    score = blurb_score(BIOELECTRA).score
    return Measure(
        abs(score - BIOELECTRA_BLURB),
        f"{score:.4f} (published {BIOELECTRA_BLURB:.2f}); gap "
        f"**{abs(score - BIOELECTRA_BLURB):.4f}**",
        0.0,
    )


def _electra_paper() -> Measure:
    pubmedbert = table_6()["PubMedBERT"]["BLURB score"]
    return Measure(
        BIOELECTRA_BLURB - pubmedbert,
        f"BLURB: BioELECTRA (P) {BIOELECTRA_BLURB:.2f} vs PubMedBERT "
        f"{pubmedbert:.2f} (**{BIOELECTRA_BLURB - pubmedbert:+.2f}**)",
    )


def _electra_ours(results: Dict) -> Measure:
    f1, updates, minutes = results["f1"], results["updates"], results["minutes"]
    electra, mlm = (statistics.fmean(f1[m]) for m in (ELECTRA, MLM))
    random_init = (
        f"; random init {statistics.fmean(f1[RANDOM_INIT]):.2f}" if f1.get(RANDOM_INIT) else ""
    )
    budget = (
        f" in {minutes:g} min each" if minutes else ""
    )  # None: the same updates for both (no budget)
    return differences(
        [e - m for e, m in zip(f1[ELECTRA], f1[MLM])],
        lambda m, n: f"NCBI-disease F1: ELECTRA "
        f"discriminator {electra:.2f} vs masked LM {mlm:.2f} (**{m:+.2f}** {n}{random_init}; "
        f"{updates[ELECTRA]} vs {updates[MLM]} pretraining updates{budget})",
    )


def _electra_sides(results: Dict) -> List[Side]:
    f1, updates, trivial = results["f1"], results["updates"], _trivial(results, "NCBI-disease")
    return [
        side(
            f"{name} after {updates[m]} of {results['planned'][m]} planned pretraining updates",
            f1[m],
            f1.get(RANDOM_INIT),
            trivial,
        )
        for m, name in ((ELECTRA, "ELECTRA's discriminator"), (MLM, "the masked LM"))
    ]


def _electra_detail(results: Dict) -> str:
    disc = results.get("discriminator") or {}
    if disc.get("replaced_prob") is None:
        return ""
    return (
        f"the discriminator's last validation: mean P(replaced) {disc['replaced_prob']:.3f} on "
        f"replaced tokens vs {disc['original_prob']:.3f} on original ones, replaced recall "
        f"{disc['replaced_recall']:g}"
    )


def _trivial(results: Dict, dataset: str) -> Optional[float]:
    """The trivial baseline's score on ``dataset`` that the step recorded (None: none)."""
    return (results.get("trivial") or {}).get(dataset)


def _distill_paper(kind: str) -> Callable[[], Measure]:
    def paper() -> Measure:
        if kind == "retention":  # seed 004 Table 1, NCBI-disease F1
            return Measure(
                85.22 - 88.62,
                "NCBI-disease F1: TinyBioBERT 85.22 vs its teacher BioBERT 88.62 "
                "(**-3.40**, 96.2 %)",
            )
        return Measure(
            85.0 - 84.7,
            "Table 6, mean over 18 tasks: distill + align 85.0 vs ours-base 84.7 (**+0.3**)",
        )

    return paper


def _distill_ours(kind: str) -> Callable[[Dict], Measure]:
    """Ours of a distillation finding from distill_minilm.py's results: TinyBioBERT's student minus
    its teacher (``retention``), or bio-lm's recipe's student minus its architecture from random
    init (``gain``), paired by seed."""

    def ours(results: Dict) -> Measure:
        f1, shapes = results["f1"], results["shapes"]
        mean = {name: statistics.fmean(values) for name, values in f1.items()}
        if kind == "retention":
            student = TINY_STUDENT
            return differences(
                [s - t for s, t in zip(f1[student], f1[TEACHER])],
                lambda m, n: f"TinyBioBERT-style {shapes[student]} student {mean[student]:.2f} vs "
                f"its teacher MiniLM {shapes[TEACHER]} {mean[TEACHER]:.2f} (**{m:+.2f}** {n}, "
                f"{_share(mean[student], mean[TEACHER])})",
            )
        twin = results["random_of"][BIOLM_STUDENT]
        return differences(
            [s - r for s, r in zip(f1[BIOLM_STUDENT], f1[twin])],
            lambda m, n: f"bio-lm's recipe on a {shapes[BIOLM_STUDENT]} student of MiniLM "
            f"{mean[BIOLM_STUDENT]:.2f} vs the same from random init {mean[twin]:.2f} "
            f"(**{m:+.2f}** {n})",
        )

    return ours


def _distill_sides(kind: str) -> Callable[[Dict], List[Side]]:
    def sides(results: Dict) -> List[Side]:
        f1, shapes, twins = results["f1"], results["shapes"], results["random_of"]
        trivial = _trivial(results, "NCBI-disease")
        if kind == "retention":
            return [
                side(
                    f"the distilled {shapes[TINY_STUDENT]} student",
                    f1[TINY_STUDENT],
                    f1.get(twins[TINY_STUDENT]),
                    trivial,
                ),
                side(f"MiniLM {shapes[TEACHER]}", f1[TEACHER], f1.get(TEACHER_RANDOM), trivial),
            ]
        twin = twins[BIOLM_STUDENT]
        return [
            side(
                f"the distilled {shapes[BIOLM_STUDENT]} student",
                f1[BIOLM_STUDENT],
                f1.get(twin),
                trivial,
            ),
            side(f"the {shapes[twin]} student from random init", f1[twin], None, trivial, True),
        ]

    return sides


def _share(part: float, whole: float) -> str:
    """``part`` as a percentage of ``whole`` ("n/a" when ``whole`` is not positive)."""
    return f"{100 * part / whole:.1f} %" if whole > 0 else "n/a %"


def _distill_detail(results: Dict) -> str:
    """Every preset's student: its F1 over its random-init twin, its retention of the teacher and
    its inference speed-up over the teacher."""
    f1, shapes, twins = results["f1"], results["shapes"], results["random_of"]
    mean = {name: statistics.fmean(values) for name, values in f1.items()}
    speed = results.get("speed") or {}
    teacher_speed = speed.get(f"teacher {shapes[TEACHER]}")
    parts = []
    for name, label in results["labels"].items():
        if name == TEACHER:
            continue
        student_speed = speed.get(f"student {shapes[name]}")
        faster = (
            f", {student_speed / teacher_speed:.1f}x as fast"
            if student_speed and teacher_speed
            else ""
        )
        parts.append(
            f"{label.split(' (')[0]} {shapes[name]} {mean[name]:.2f} "
            f"({mean[name] - mean[twins[name]]:+.2f} over random init, "
            f"{_share(mean[name], mean[TEACHER])} of the teacher{faster})"
        )
    return f"MiniLM {mean[TEACHER]:.2f} (random init {mean[TEACHER_RANDOM]:.2f}); " + "; ".join(
        parts
    )


def _speed_ours(results: Dict) -> Measure:
    six, tiny = results["speedup"]["student 6 x 768"], results["speedup"]["student 4 x 312"]
    mean, spread = statistics.fmean(six), spread_of(six)
    repeats = f"± {spread:.2f} over {len(six)} runs" if spread is not None else "one run"
    return Measure(
        mean - 1,
        f"6 x 768 **{mean:.2f}x** {repeats} (4 x 312: {statistics.fmean(tiny):.1f}x)",
        spread,
        [v - 1 for v in six],
    )


def _variant(name: str, reference: str, paper_text: str, paper_effect: float):
    def paper() -> Measure:
        return Measure(paper_effect, paper_text)

    def ours(results: Dict) -> Measure:
        row, ref = results[name], results[reference]
        before, after = statistics.fmean(ref["values"]), statistics.fmean(row["values"])
        return differences(
            row["diffs"],
            lambda m, n: f"{name.split(':')[0]}: {before:.2f} → {after:.2f} " f"(**{m:+.2f}** {n})",
        )

    def sides(results: Dict) -> List[Side]:
        # each row: its per-seed "values", and the random-init run and trivial baseline of its
        # dataset when the step recorded them
        return [
            side(f"the {key.split(':')[1]} variant", r["values"], r.get("random"), r.get("trivial"))
            for key, r in ((reference, results[reference]), (name, results[name]))
        ]

    return paper, ours, sides


# the step's sets (every NER and relation set in ../shared/data) under Table 6's names
DAPT_SETS = ("NCBI-disease", "BC5-disease", "GAD", "DDI")


def _dapt_paper() -> Measure:
    table = table_6()
    gains = {d: table["BioBERT"][d] - table["BERT-cased"][d] for d in DAPT_SETS}
    each = ", ".join(f"{d} {g:+.2f}" for d, g in gains.items())
    mean = statistics.fmean(gains.values())
    return Measure(
        mean,
        f"BioBERT (BERT continued on PubMed) vs BERT-cased, mean over {len(gains)} sets: "
        f"**{mean:+.2f}** ({each})",
    )


def _dapt_ours(results: Dict) -> Measure:
    """Per fine-tuning seed the mean gain over every set the step ran (none left out)."""
    per_seed = [statistics.fmean(gains) for gains in zip(*(r["gains"] for r in results.values()))]
    each = ", ".join(
        f"{d} {statistics.fmean(r['scores']):.2f} → {statistics.fmean(r['continued']):.2f}"
        for d, r in results.items()
    )
    return differences(
        per_seed,
        lambda m, n: f"MiniLM continued on PubMed, mean over {len(results)} sets: **{m:+.2f}** "
        f"{n} ({each})",
    )


def _dapt_sides(results: Dict) -> List[Side]:
    """Both sides on every set: MiniLM as imported and continued, each against the random-init
    run and the trivial baseline of that set."""
    return [
        side(f"{d}: MiniLM {what}", r[key], r.get("random"), r.get("trivial"))
        for d, r in results.items()
        for what, key in (("as imported", "scores"), ("continued on PubMed", "continued"))
    ]


_VOCAB_DOMAIN = _break_out("BERT-cased", "PubMedBERT-uncased (30k)", "MiniLM", "pubmedbert")
_VOCAB_SIZE = _break_out(
    "BioMegatron-bio-30k-cased", "BioMegatron-bio-50k-cased", "biomegatron-30k", "biomegatron-50k"
)
_BLURB_SUMS = _arithmetic(
    "columns",
    "PubMedBERT",
    2,
    "PubMedBERT's BLURB score 81.10 and the 8 other models' "
    "(BERT-uncased 75.99, ...) from the 13 numbers above each",
)
_BIOLM_SUMS = _arithmetic(
    "cells",
    "Ours-large Mean (all)",
    1,
    "Ours-large's Mean (all) 85.8 and the other 39 summary "
    "cells (5 rows x 8 models) from the 18 per-task numbers",
)
_BILSTM = _variant(
    "bc5-disease:bilstm",
    "bc5-disease:linear",
    "Table 10, BC5-disease F1: linear 85.62 → Bi-LSTM " "85.64 (**+0.02**: no substantial gain)",
    0.02,
)
_MARKERS = _variant(
    "ddi:marker_start",
    "ddi:dummy_cls",
    "Table 12 (no GAD column), DDI F1: dummified [CLS] 82.36 → "
    "markers + entity start 82.18 (**-0.18**; ChemProt +0.34)",
    -0.18,
)
SHORT = "at this scale: "

FINDINGS = [
    Finding(
        "vocab-breakout",
        "002",
        "An in-domain vocabulary breaks entity words into fewer sub-tokens than "
        "BERT's general one (Table 3)",
        SIGN,
        _VOCAB_DOMAIN[0],
        "vocab",
        _VOCAB_DOMAIN[1],
        "sub-tokens per entity word (BC5CDR-disease train) of MiniLM's BERT WordPiece and of the pubmedbert "
        "preset learned from the PubMed sample, from vocab_report.json",
        "our general vocabulary is BERT's uncased one (MiniLM's), the paper's BERT-cased; our corpus is the "
        "PubMed sample (6 M words), not PubMed",
        unit="sub-tokens per entity word",
    ),
    Finding(
        "vocab-size",
        "002",
        "A larger in-domain vocabulary (50k vs 30k) breaks entity words less (Table 3)",
        SIGN,
        _VOCAB_SIZE[0],
        "vocab",
        _VOCAB_SIZE[1],
        "sub-tokens per entity word (BC5CDR-disease train) of the biomegatron-30k and -50k presets (SentencePiece) "
        "learned from the PubMed sample",
        "a 50k vocabulary learned from 6 M words holds rarer pieces than one learned from PubMed",
        unit="sub-tokens per entity word",
    ),
    Finding(
        "vocab-terms",
        "001",
        "PubMedBERT's vocabulary keeps common biomedical terms whole where BERT's "
        "shatters them (Table 1)",
        SIGN,
        _terms_paper,
        "vocab",
        _terms_ours,
        "Table 1's terms kept whole (one piece) by MiniLM's BERT WordPiece and by the pubmedbert preset",
        "our in-domain vocabulary is learned from the PubMed sample (6 M words), not PubMed",
        unit="terms kept whole",
    ),
    Finding(
        "blurb-arithmetic",
        "001",
        "The BLURB score is the macro average over the six task types of each type's "
        "mean (Table 6)",
        VALUE,
        _BLURB_SUMS[0],
        "blurb-table-6",
        _BLURB_SUMS[1],
        "each of Table 6's nine BLURB scores computed from its 13 published numbers by fairseq_bio's BLURB",
        "the published inputs are rounded to 0.01",
        tolerance=0.01 + 1e-9,
        unit="|computed - published|",
    ),
    Finding(
        "dapt",
        "001",
        "Pretraining on PubMed beats general-domain pretraining downstream (Table 6)",
        SIGN,
        _dapt_paper,
        "dapt",
        _dapt_ours,
        "test F1 gain of MiniLM continued on PubMed over MiniLM itself on every NER and relation set of "
        "../shared/data (entity F1; micro F1 without the negative class), averaged over the sets per "
        "fine-tuning seed, from domain_adaptation.py's results.json",
        SHORT
        + "MiniLM continued for a few hundred updates on 4 M tokens, not BERT on PubMed for days; the "
        "fine-tuning is one or two epochs",
        unit="F1 points",
        sides=_dapt_sides,
    ),
    Finding(
        "variants-bilstm",
        "001",
        "A Bi-LSTM head adds nothing over a linear layer for NER (Table 10)",
        NONE,
        _BILSTM[0],
        "variants",
        _BILSTM[1],
        "BC5-disease test entity F1 of the BiLSTM head minus the linear one, paired by seed, from "
        "finetune_variants.py's results.json",
        SHORT
        + "the fresh BiLSTM trains one epoch at the encoder's learning rate and is undertrained "
        "(benchmarks/README.md: with 20 x the rate it gains +4.7 instead)",
        tolerance=NO_DIFFERENCE,
        unit="F1 points",
        sides=_BILSTM[2],
    ),
    Finding(
        "variants-markers",
        "001",
        "Entity markers + entity start encode a relation as well as dummified [CLS] " "(Table 12)",
        NONE,
        _MARKERS[0],
        "variants",
        _MARKERS[1],
        "DDI test micro F1 (the four interaction types, the negative class left out) of markers + "
        "entity start minus dummified [CLS], paired by seed, from finetune_variants.py's results.json",
        SHORT
        + "the four marker tokens start as the mean embedding and the entity-start head is new, with 800 "
        "updates of 16 pairs at lr 1e-4 of a 6-layer MiniLM (the paper: PubMedBERT, 5 epochs)",
        tolerance=NO_DIFFERENCE,
        unit="F1 points",
        sides=_MARKERS[2],
    ),
    Finding(
        "biolm-arithmetic",
        "000",
        "Table 2's summary rows are plain means over the tasks of each group",
        VALUE,
        _BIOLM_SUMS[0],
        "biolm-table-2",
        _BIOLM_SUMS[1],
        "all 40 summary cells (8 models x 5 rows) computed from the 18 published per-task numbers by "
        "fairseq_bio's bio-lm benchmark",
        "the published inputs are rounded to 0.1",
        tolerance=0.1 + 1e-9,
        unit="|computed - published|",
    ),
    Finding(
        "biolm-distill",
        "000",
        "Distilling from the larger teacher improves the student (sec. 7, Table 6)",
        SIGN,
        _distill_paper("gain"),
        "distill-minilm",
        _distill_ours("gain"),
        "NCBI-disease test entity F1 of a 3-layer student of MiniLM (its every other layer) distilled "
        "with bio-lm's recipe (distill_biolm) minus the same architecture from random initialisation, "
        "paired by fine-tuning seed, from distill_minilm.py's results.json",
        SHORT
        + "the paper sets its distilled base model beside the same model pretrained without a teacher; "
        "ours sets it beside random initialisation (no pretrained 3-layer model here), after a few "
        "hundred distillation updates on the PubMed sample, not days on PubMed",
        unit="F1 points",
        sides=_distill_sides("gain"),
        detail=_distill_detail,
    ),
    Finding(
        "electra-arithmetic",
        "003",
        "BioELECTRA's BLURB score is the same macro average (Table 2)",
        VALUE,
        _bioelectra_paper,
        "blurb-table-6",
        _bioelectra_ours,
        "BioELECTRA (P)'s 13 published numbers through fairseq_bio's BLURB",
        "the inputs are rounded to 0.01",
        tolerance=0.01 + 1e-9,
        unit="|computed - published|",
    ),
    Finding(
        "electra-downstream",
        "003",
        "Replaced-token detection pretraining beats masked-LM pretraining "
        "downstream (Tables 2-4)",
        SIGN,
        _electra_paper,
        "electra-downstream",
        _electra_ours,
        "NCBI-disease test entity F1 of a tiny ELECTRA's 4 x 256 discriminator (extracted by "
        "fairseq-bio-extract-encoder) minus a masked-LM bio_roberta of the same size, both pretrained on the "
        "PubMed sample for the same wall-clock minutes (ELECTRA's last checkpoint), paired by fine-tuning seed, "
        "from electra_downstream.py's results.json; ours is in F1 points on one NER set, the "
        "paper's in BLURB points (13 tasks)",
        SHORT
        + "minutes of pretraining each (about a thousand updates of 16 x 128 tokens: the discriminator "
        "separates replaced tokens while the generator's samples are near random, and loses most of it once the "
        "generator reaches the unigram stage, benchmarks/HISTORY.md), against the paper's 1M steps of 512 "
        "sequences (as many sequences as PubMedBERT saw); a 64-wide generator; one NER set fine-tuned on 1,000 "
        "sentences; and the paper's baseline is PubMedBERT itself, not a masked LM trained beside it",
        unit="points (paper BLURB, ours F1)",
        sides=_electra_sides,
        detail=_electra_detail,
    ),
    Finding(
        "compact-retention",
        "004",
        "A distilled tiny student falls a little short of its teacher's NER F1 " "(Table 1)",
        SIGN,
        _distill_paper("retention"),
        "distill-minilm",
        _distill_ours("retention"),
        "NCBI-disease test entity F1 of a TinyBioBERT-style 3 x 192 student (random init, "
        "distill_tinybiobert: layer-wise MSE with projection) minus its teacher MiniLM-L6-H384's, "
        "paired by fine-tuning seed, from distill_minilm.py's results.json; DistilBioBERT, "
        "CompactBioBERT and bio-lm's recipe on 3 x 384 beside it",
        SHORT
        + "a few hundred distillation updates on the PubMed sample against TinyBioBERT's 100k on "
        "PubMed; the teacher is MiniLM (a general-domain sentence encoder whose MLM head is fitted "
        "here), not BioBERT",
        unit="F1 points",
        sides=_distill_sides("retention"),
        detail=_distill_detail,
    ),
    Finding(
        "compact-speed",
        "004",
        "A 6-layer student of a 12 x 768 teacher runs about 1.6x as fast (sec. 2, " "Figure 2)",
        SIGN,
        lambda: Measure(
            0.6,
            'DistilBERT\'s "60 % faster" (**1.6x**), the 6 x 768 shape of '
            "DistilBioBERT and CompactBioBERT; Figure 2 gives no numbers",
        ),
        "distill-speed",
        _speed_ours,
        "inference speed-up of the 6 x 768 student over the 12 x 768 teacher (speed-up - 1 is compared), from "
        "distillation.md",
        "timings on a shared machine vary from run to run",
        unit="speed-up - 1",
    ),
]
