"""The continued-pretraining chain of benchmarks/domain_adaptation.py (`make bench-dapt`) on tiny
slices, for real: MiniLM imported, PubMed documents encoded with its WordPiece, a few continued
masked-LM updates through fairseq-hydra-train, perplexity by fairseq-validate, fine-tuning and
scoring by fairseq-bio-blurb on a slice of NCBI-disease, the report written."""

import json
import sys

from conftest import REPO, SHARED_DATA, conll_slice, logged

from fairseq_bio import checkpoints, runs

GENERAL = [
    "The train was late again this morning, so we walked to the harbour and watched the boats come in.",
    "She bought bread, cheese and a bag of apples at the market before the rain started.",
    "Our team lost the final match, but the crowd stayed to sing until the lights went out.",
    "He read the letter twice, folded it carefully and put it back in the drawer of the old desk.",
    "The children built a snowman in the garden and gave it their father's hat and scarf.",
]
SIZES = (
    "encoder_layers",
    "encoder_embed_dim",
    "encoder_ffn_embed_dim",
    "encoder_attention_heads",
    "max_positions",
)


def test_import_encode_continue_fine_tune_score(pubmed_sample, tmp_path):
    data = tmp_path / "task-data" / "ner" / "NCBI-disease"
    data.mkdir(parents=True)
    for split, n in (("train", 120), ("devel", 40), ("test", 40)):
        conll_slice(SHARED_DATA / "ner" / "NCBI-disease" / f"{split}.tsv", data / f"{split}.tsv", n)
    out = tmp_path / "dapt"
    general = (
        tmp_path / "general.txt"
    )  # the drift probe's plain text: paragraphs of everyday English
    # 60 paragraphs of 3 sentences, about 14 blocks of 128 held out
    paragraphs = [
        f"{a} {b} {c}" for a in GENERAL for b in GENERAL for c in GENERAL if len({a, b, c}) == 3
    ]
    general.write_text("".join(f"{p}\n\n" for p in paragraphs), encoding="utf-8")
    cmd = [
        sys.executable,
        REPO / "benchmarks" / "domain_adaptation.py",
        "--out",
        out,
        "--results",
        tmp_path / "copies",
        "--updates",
        "8",
        "--max-docs",
        "40",
        "--tasks",
        "ncbi-disease",
        "--seeds",
        "1",
        "--at",
        "0,full",
        "--data",
        tmp_path / "task-data",
        "--finetune-max-update",
        "6",
        "--general-text",
        general,
        "--coverage",
    ]
    result = runs.capture(cmd, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    # the continued masked LM: held-out loss falls from the import's to the end of the run
    valid = logged(out / "pretrain" / "train.log", "valid")
    assert sorted(valid)[-1] == 8 and float(valid[8]["loss"]) < float(valid[min(valid)]["loss"])
    results = json.loads((out / "results.json").read_text())
    ppl = {int(k): v for k, v in results["perplexity"].items()}
    assert sorted(ppl) == [0, 8] and ppl[8] < ppl[0]

    # the continued checkpoint is the import's model: same vocabulary, architecture, parameters'
    # names and shapes
    imported, continued = out / "minilm" / "model.pt", out / "pretrain" / "checkpoint_last.pt"
    assert (continued.parent / "dict.txt").read_bytes() == (
        imported.parent / "dict.txt"
    ).read_bytes()
    before, after = checkpoints.load_checkpoint(imported), checkpoints.load_checkpoint(continued)
    assert {k: before["cfg"]["model"][k] for k in SIZES} == {
        k: after["cfg"]["model"][k] for k in SIZES
    }
    assert {k: v.shape for k, v in before["model"].items()} == {
        k: v.shape for k, v in after["model"].items()
    }
    assert after["optimizer_history"][-1]["num_updates"] == 8

    # both checkpoints fine-tuned and scored; the report and its copies written
    (row,) = results["rows"]
    assert row["dataset"] == "NCBI-disease" and sorted(int(k) for k in row["scores"]) == [0, 8]
    assert all(0 <= s["mean"] <= 100 for s in row["scores"].values())
    report = (out / "results.md").read_text()
    assert (
        "MLM perplexity" in report
        and "| general text (--general-text) | MLM perplexity |" in report
    )
    general_ppl = {int(k): v for k, v in results["general_perplexity"].items()}
    assert sorted(general_ppl) == [0, 8] and all(v > 1 for v in general_ppl.values())
    # the encoder moved from the import, and nothing at 0; the corpus coverage of the NCBI slice's
    # mentions
    change = {int(k): v for k, v in results["encoder_change"].items()}
    assert (
        set(change[0].values()) == {0.0}
        and 0 < change[8]["embeddings"]
        and 0 < change[8]["encoder"] < 1
    )
    assert (
        "layer 0" in change[8] and "| embeddings: change from the import | relative L2 |" in report
    )
    assert set(results["coverage"]) == {"NCBI-disease train", "NCBI-disease test"}
    assert all(
        0 <= c["in_corpus"] <= 1 and 0 < c["words_split"] < 1 for c in results["coverage"].values()
    )
    assert sorted(p.name for p in (tmp_path / "copies").iterdir()) == [
        f"domain_adaptation.{s}" for s in ("json", "md", "png")
    ]
