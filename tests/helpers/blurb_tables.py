"""Results tables transcribed from the papers, for the scoring tests: PubMedBERT's Table 6 (every
BLURB dataset's test score and the BLURB score of nine models)."""


def parse_table(text):
    """A results table as transcribed from a paper: a header of model names, then one row per
    dataset."""
    header, *rows = [line.split() for line in text.strip().splitlines()]
    table = {model: {} for model in header}
    for row in rows:
        name, values = " ".join(row[: -len(header)]), row[-len(header) :]
        for model, value in zip(header, values):
            table[model][name] = float(value)
    return table


# Gu et al. 2020 (seed 001_de92c2f240eb10d4.txt), Table 6, transcribed: per-dataset test results and
# the published BLURB score of each model (BERT, RoBERTa, BioBERT, SciBERT, ClinicalBERT, BlueBERT,
# PubMedBERT).
TABLE_6 = parse_table(
    """
             BERT-uncased BERT-cased RoBERTa BioBERT SciBERT-uncased SciBERT-cased ClinicalBERT BlueBERT PubMedBERT
BC5-chem            89.25 89.99 89.43 92.85 92.49 92.51 90.80 91.19 93.33
BC5-disease         81.44 79.92 80.65 84.70 84.54 84.70 83.04 83.69 85.62
NCBI-disease        85.67 85.87 86.62 89.13 88.10 88.25 86.32 88.04 87.82
BC2GM               80.90 81.23 80.90 83.82 83.36 83.36 81.71 81.87 84.52
JNLPBA              78.63 78.52 78.81 79.35 79.45 79.56 78.59 78.68 80.06
EBM PICO            72.34 71.70 73.02 73.18 73.12 73.06 72.06 72.54 73.38
ChemProt            71.86 71.54 72.98 76.14 75.24 75.00 72.04 71.46 77.24
DDI                 80.04 79.34 79.52 80.88 81.06 81.22 78.20 77.78 82.36
GAD                 77.72 77.28 77.72 80.94 80.90 79.66 78.40 77.24 82.34
BIOSSES             82.68 81.40 81.25 89.52 86.25 87.15 91.23 85.38 92.30
HoC                 80.20 80.12 79.66 81.54 80.66 81.16 80.74 80.48 82.32
PubMedQA            51.62 49.96 52.84 60.24 57.38 51.40 49.08 48.44 55.84
BioASQ              70.36 74.44 75.20 84.14 78.86 74.22 68.50 68.71 87.56
BLURB score         75.99 75.76 76.33 80.29 78.80 78.08 77.19 76.19 81.10
"""
)
