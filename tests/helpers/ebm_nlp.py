"""A tiny EBM-NLP 2.00 release in the real layout (six documents, the three PICO elements'
aggregated starting spans, a crowd test part that must not be used) and the IO-tagged CoNLL splits
it converts to."""

from pathlib import Path

SPANS = "annotations/aggregated/starting_spans"
ELEMENTS = ("participants", "interventions", "outcomes")

# pmid -> tokens; labels per part as (participants, interventions, outcomes), one 0/1 character per
# token.
EBM_TOKENS = {
    "101": "Aspirin for pain in 40 adults . Pain fell .",
    "102": "Insulin in diabetic patients on insulin lowered glucose",
    "103": "Exercise helped obese children .",
    "104": "No effect was seen .",
    "201": "Surgery improved survival .",
    "202": "Older women received vitamin D .",
}
EBM_TRAIN = {
    "101": ("0000110000", "1000000000", "0010000100"),
    # word 3: P+O -> OUT; word 5: P+I -> INT; word 6: I+O -> OUT (the later element wins)
    "102": ("00111100", "10000110", "00010011"),
    "103": ("00110", "10010", "00000"),  # word 3: P+I -> INT
    "104": ("00000", "00000", "00000"),
    "201": ("0000", "0000", "0000"),  # also a gold test document: never in train
}
EBM_GOLD = {
    "201": ("0000", "1000", "0010"),
    "202": ("110000", "000110", "000000"),
}
EBM_CROWD = {"201": ("1111", "1111", "1111")}  # test/crowd: must not be used

EXPECTED_TRAIN_IO = """\
Aspirin\tI-INT
for\tO
pain\tI-OUT
in\tO
40\tI-PAR
adults\tI-PAR
.\tO

Pain\tI-OUT
fell\tO
.\tO

Insulin\tI-INT
in\tO
diabetic\tI-PAR
patients\tI-OUT
on\tI-PAR
insulin\tI-INT
lowered\tI-OUT
glucose\tI-OUT

No\tO
effect\tO
was\tO
seen\tO
.\tO

"""
EXPECTED_DEVEL_IO = "Exercise\tI-INT\nhelped\tO\nobese\tI-PAR\nchildren\tI-INT\n.\tO\n\n"
EXPECTED_TEST_IO = """\
Surgery\tI-INT
improved\tO
survival\tI-OUT
.\tO

Older\tI-PAR
women\tI-PAR
received\tO
vitamin\tI-INT
D\tI-INT
.\tO

"""


def write_ebm_release(root: Path, tokens=None, train=None, gold=None, crowd=None) -> Path:
    """An EBM-NLP 2.00 tree: documents/<PMID>.tokens and aggregated starting_spans
    <PMID>.AGGREGATED.ann files."""
    tokens = EBM_TOKENS if tokens is None else tokens
    (root / "documents").mkdir(parents=True)
    for pmid, text in tokens.items():
        (root / "documents" / f"{pmid}.tokens").write_text(
            "\n".join(text.split()) + "\n", encoding="utf-8"
        )
        (root / "documents" / f"{pmid}.txt").write_text(text + "\n", encoding="utf-8")
    parts = {
        "train": EBM_TRAIN if train is None else train,
        "test/gold": EBM_GOLD if gold is None else gold,
    }
    parts["test/crowd"] = EBM_CROWD if crowd is None else crowd
    for part, docs in parts.items():
        for pmid, labels in docs.items():
            for element, values in zip(ELEMENTS, labels):
                folder = root / SPANS / element / part
                folder.mkdir(parents=True, exist_ok=True)
                (folder / f"{pmid}.AGGREGATED.ann").write_text(
                    "\n".join(values) + "\n", encoding="utf-8"
                )
    return root


def dev_list(tmp_path, *pmids) -> Path:
    path = tmp_path / "dev.pmids"
    path.write_text("# dev documents\n" + "".join(f"{p}\n" for p in pmids), encoding="utf-8")
    return path
