"""Checkpoints as fairseq writes them (fairseq_bio.checkpoints, patches.checkpoint_safety): they
load with weights_only=True through exactly the allowlisted classes, and fairseq-train,
RobertaModel.from_pretrained and continued pretraining take them; a checkpoint that pickles anything
else is refused before any of it runs, and no call in the project passes weights_only=False.
docs/stack.md's table of what ``import fairseq_bio`` changes names these."""

import pytest
import torch
from conftest import REPO, run_cli
from helpers.checkpoints import global_name, unsafe_globals

from fairseq_bio import checkpoints, runs

ARGPARSE_TINY = [
    "--encoder-layers",
    "2",
    "--encoder-embed-dim",
    "32",
    "--encoder-ffn-embed-dim",
    "64",
    "--encoder-attention-heads",
    "4",
    "--tokens-per-sample",
    "64",
    "--batch-size",
    "8",
    "--optimizer",
    "adam",
    "--lr",
    "1e-4",
    "--log-format",
    "simple",
    "--cpu",
    "--no-epoch-checkpoints",
    "--save-interval-updates",
    "3",
]


def fairseq_train(data, save_dir, cwd, *args, max_update=3, check=True):
    return run_cli(
        runs.train(data, "--save-dir", save_dir, "--max-update", max_update, *ARGPARSE_TINY, *args),
        cwd=cwd,
        check=check,
    )


@pytest.fixture(scope="module")
def written_checkpoints(data_bin, tmp_path_factory):
    """Checkpoints as fairseq writes them: argparse RoBERTa (Namespace config), bio_roberta, and a
    state loaded by fairseq and saved again (what average_checkpoints and the resume broadcast
    carry)."""
    data = data_bin("bytebpe")
    work = tmp_path_factory.mktemp("fairseq_checkpoints")
    fairseq_train(
        data,
        work / "stock",
        work,
        "--task",
        "masked_lm",
        "--criterion",
        "masked_lm",
        "--arch",
        "roberta_base",
    )
    fairseq_train(
        data,
        work / "bio",
        work,
        "--task",
        "bio_masked_lm",
        "--criterion",
        "masked_lm",
        "--arch",
        "bio_roberta_base",
    )
    from fairseq import checkpoint_utils

    resaved = work / "resaved.pt"
    torch.save(
        checkpoint_utils.load_checkpoint_to_cpu(str(work / "stock" / "checkpoint_last.pt")), resaved
    )
    return (
        data,
        work,
        [work / "stock" / "checkpoint_last.pt", work / "bio" / "checkpoint_last.pt", resaved],
    )


def test_allowlist_is_exactly_what_fairseq_writes(written_checkpoints):
    _, _, paths = written_checkpoints
    found = set().union(*(unsafe_globals(p) for p in paths))
    assert found == {global_name(g) for g in checkpoints.FAIRSEQ_SAFE_GLOBALS}
    for path in paths:
        state = checkpoints.load_checkpoint(path)
        assert "model" in state and state["optimizer_history"]


def test_resume_through_fairseq_train(written_checkpoints):
    """fairseq-train resumes from its own checkpoint_last.pt (argparse RoBERTa: a pickled
    Namespace)."""
    data, work, _ = written_checkpoints
    result = fairseq_train(
        data,
        work / "stock",
        work,
        "--task",
        "masked_lm",
        "--criterion",
        "masked_lm",
        "--arch",
        "roberta_base",
        max_update=6,
    )
    assert (
        "Loaded checkpoint" in result.stdout + result.stderr
        and "@ 3 updates" in result.stdout + result.stderr
    )
    assert (
        torch.load(work / "stock" / "checkpoint_last.pt", weights_only=True)["optimizer_history"][
            -1
        ]["num_updates"]
        == 6
    )


def test_stock_roberta_from_pretrained_loads(written_checkpoints):
    from fairseq.models.roberta import RobertaModel

    data, work, _ = written_checkpoints
    hub = RobertaModel.from_pretrained(
        str(work / "stock"), "checkpoint_last.pt", data_name_or_path=str(data), bpe=None
    )
    tokens = torch.tensor([[0, 10, 11, 12, 2]])
    assert hub.model(tokens)[0].shape[:2] == (1, 5)


def test_stock_roberta_checkpoint_starts_continued_pretraining(written_checkpoints, tmp_path):
    """bio_roberta has RoBERTa's parameter names: a fairseq RoBERTa checkpoint restores into it."""
    data, work, _ = written_checkpoints
    stock = work / "stock" / "checkpoint_last.pt"
    fairseq_train(
        data,
        tmp_path / "continued",
        tmp_path,
        "--task",
        "bio_masked_lm",
        "--criterion",
        "masked_lm",
        "--arch",
        "bio_roberta_base",
        "--max-positions",
        "64",
        "--seed",
        "2",
        "--restore-file",
        stock,
        "--reset-optimizer",
        "--reset-lr-scheduler",
        "--reset-dataloader",
        "--reset-meters",
        "--lr",
        "1e-7",
        max_update=1,
    )
    before = checkpoints.load_checkpoint(stock)["model"]
    after = checkpoints.load_checkpoint(tmp_path / "continued" / "checkpoint_last.pt")["model"]
    assert set(before) == set(after)
    for name, tensor in before.items():
        if (
            tensor.is_floating_point()
        ):  # one update at lr 1e-7 from the stock weights, not a fresh init (seed 2)
            torch.testing.assert_close(after[name], tensor, atol=1e-5, rtol=0, msg=name)


class _Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


def test_planted_malicious_checkpoint_is_refused(written_checkpoints, tmp_path):
    data, work, _ = written_checkpoints
    marker = tmp_path / "pwned"
    save = tmp_path / "save"
    save.mkdir()
    state = torch.load(work / "bio" / "checkpoint_last.pt", weights_only=True)
    state["extra_state"]["payload"] = _Exploit(marker)
    torch.save(state, save / "checkpoint_last.pt")

    with pytest.raises(
        checkpoints.UnsafeCheckpointError,
        match=r"checkpoint_last.pt: refused to load: it pickles posix.system",
    ):
        checkpoints.load_checkpoint(save / "checkpoint_last.pt")

    result = fairseq_train(
        data,
        save,
        tmp_path,
        "--task",
        "bio_masked_lm",
        "--criterion",
        "masked_lm",
        "--arch",
        "bio_roberta_base",
        max_update=6,
        check=False,
    )
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    # fairseq-train (argparse): the plugin's excepthook prints the error alone (fairseq_bio.errors)
    assert (
        "Traceback" not in result.stderr and "refused to load: it pickles posix.system" in last_line
    )
    assert last_line.startswith(f"{save / 'checkpoint_last.pt'}: refused to load")
    assert "weights_only=False" not in last_line.replace(
        "only load checkpoints with weights_only=True", ""
    )
    assert not marker.exists()


def test_no_weights_only_false_anywhere():
    """No call in the project passes weights_only=False (or anything but True)."""
    import ast

    offenders = []
    for directory in ("fairseq_bio", "preprocess", "benchmarks", "tests"):
        for path in (REPO / directory).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                for kw in getattr(node, "keywords", []) if isinstance(node, ast.Call) else []:
                    if kw.arg == "weights_only" and not (
                        isinstance(kw.value, ast.Constant) and kw.value.value is True
                    ):
                        offenders.append(f"{path}:{node.lineno}")
    assert offenders == []
