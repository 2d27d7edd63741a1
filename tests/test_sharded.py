"""Fully sharded data parallel (``distributed_training.ddp_backend=fully_sharded``, PyTorch's FSDP2
through ``fairseq_bio.patches.sharded``) on this CPU: two real fairseq-hydra-train processes over
gloo, started as the two tasks of a SLURM job step (test_distributed's ``slurm``), on the suite's
PubMed data-bin and its tiny encoder size.

- The sharded run and plain data parallel (torch DDP), same two ranks and batches, end with the same
  parameters and optimizer states and log the same losses; each rank held half of the parameters.
- Its checkpoint is consolidated: a normal bio_roberta checkpoint (the plain run's keys, shapes and
  optimizer layout, plain tensors that torch's weights_only loader reads) that a tagging run
  restores from and fairseq-bio-export-hf exports.
- Killed outright (SIGKILL to both ranks) after a scheduled save, the same command resumes from
  checkpoint_last.pt and ends exactly where the uninterrupted sharded run ended, logging the same
  losses.
- fairscale's own options and the memory-efficient precisions are refused in one line (fp16 and
  bf16: test_sharded_precision.py).
"""

import re

import pytest
import torch
from conftest import logged, run_cli
from helpers.checkpoints import assert_same_parameters, parameters
from helpers.slurm import slurm, slurm_job, two_tasks  # noqa: F401  (slurm: a fixture)
from training_processes import MLM, MLM_UPDATES, hydra_command, losses, updates_in

from fairseq_bio import checkpoints

SHARDED = "distributed_training.ddp_backend=fully_sharded"
SAVE_EVERY = 5  # the killed run's scheduled checkpoint


def mlm(data_bin, *overrides):
    """test_distributed's MLM run (2 ranks x 8 sequences, 14 updates, dropout off), ``overrides``
    replacing its own."""
    keys = {o.split("=")[0] for o in overrides}
    return [
        "bio_roberta_tiny",
        f"task.data={data_bin('bytebpe')}",
        *[o for o in MLM if o.split("=")[0] not in keys],
        *overrides,
    ]


@pytest.fixture(scope="module")
def runs(data_bin, tmp_path_factory):
    """save_dirs of the plain (DDP) and the sharded two-rank run, side by side."""
    root = tmp_path_factory.mktemp("sharded")
    env = slurm_job(root)
    plain = two_tasks(mlm(data_bin)[0], root / "plain", env, *mlm(data_bin)[1:])
    sharded = two_tasks(mlm(data_bin)[0], root / "sharded", env, *mlm(data_bin)[1:], SHARDED)
    for run in (*plain, *sharded):
        assert run.finish() == 0, run.output()
    return {
        "plain": root / "plain",
        "sharded": root / "sharded",
        "outputs": [r.output(whole=True) for r in sharded],
    }


def test_sharded_equals_plain_data_parallel(runs):
    plain, sharded = runs["plain"], runs["sharded"]
    # each rank held half of every parameter (rank 0 logs its count; rank 1's is the rest)
    held = re.search(
        r"fully sharded \(PyTorch FSDP2\) over 2 ranks: this rank holds ([\d,]+) of the ([\d,]+)",
        runs["outputs"][0],
    )
    assert held, runs["outputs"][0][-3000:]
    mine, total = (int(g.replace(",", "")) for g in held.groups())
    assert total / 2 - 200 < mine <= total / 2 + 200, (
        mine,
        total,
    )  # rows split in two (odd row counts: one more)

    assert_same_parameters(plain / "checkpoint_last.pt", sharded / "checkpoint_last.pt")
    a, b = (checkpoints.load_checkpoint(d / "checkpoint_last.pt") for d in (plain, sharded))
    # a consolidated checkpoint: what plain data parallel writes, full plain tensors
    assert {k: tuple(v.shape) for k, v in b["model"].items()} == {
        k: tuple(v.shape) for k, v in a["model"].items()
    }
    assert all(type(v) is torch.Tensor for v in b["model"].values())
    state_a, state_b = a["last_optimizer_state"]["state"], b["last_optimizer_state"]["state"]
    assert state_a.keys() == state_b.keys()
    for i in state_a:
        for key in ("exp_avg", "exp_avg_sq"):
            assert (
                type(state_b[i][key]) is torch.Tensor
                and state_b[i][key].shape == state_a[i][key].shape
            )
            assert torch.allclose(state_a[i][key], state_b[i][key], atol=1e-6, rtol=0), (i, key)
    assert updates_in(sharded / "checkpoint_last.pt") == MLM_UPDATES
    plain_losses, sharded_losses = losses(f"{plain}.log"), losses(f"{sharded}.log")
    assert sorted(sharded_losses) == list(range(1, MLM_UPDATES + 1))
    assert sharded_losses == pytest.approx(plain_losses, abs=1e-3)  # logged with 3 decimals
    assert {int(e["bsz"]) for e in logged(f"{sharded}.log", "train_inner").values()} == {16}


def test_the_consolidated_checkpoint_fine_tunes_and_exports(runs, ncbi_slice, tmp_path):
    from conftest import fine_tune

    checkpoint = runs["sharded"] / "checkpoint_last.pt"
    (tmp_path / "ner").mkdir()
    log = fine_tune(
        ncbi_slice,
        tmp_path / "ner",
        f"checkpoint.restore_file={checkpoint}",
        "common.log_interval=1",
        "dataset.disable_validation=true",
        updates=3,
    )
    assert sorted(logged(log, "train_inner")) == [1, 2, 3]
    tagger = parameters(tmp_path / "ner" / "checkpoint_last.pt")
    encoder = parameters(checkpoint)
    # restored, then trained 3 updates: close, not equal
    name = "encoder.sentence_encoder.embed_positions.weight"
    assert tagger[name].shape == encoder[name].shape and not torch.equal(
        tagger[name], encoder[name]
    )
    assert (tagger[name] - encoder[name]).abs().max() < 0.05
    printed = run_cli(
        ["fairseq-bio-export-hf", "--checkpoint", checkpoint, "--out", tmp_path / "hf"],
        cwd=tmp_path,
    ).stdout
    assert "RobertaForMaskedLM" in printed and "token ids equal fairseq's" in printed


def test_a_killed_sharded_run_resumes_exactly(runs, data_bin, slurm, tmp_path):  # noqa: F811
    args = mlm(data_bin, SHARDED, f"checkpoint.save_interval_updates={SAVE_EVERY}")
    rank0, rank1 = two_tasks(args[0], tmp_path / "run", slurm, *args[1:])
    rank0.wait_for_update(SAVE_EVERY + 1)  # logged after the save at SAVE_EVERY was written
    assert (
        rank0.proc.poll() is None and rank1.proc.poll() is None
    ), "finished before it could be killed"
    for rank in (rank0, rank1):
        rank.proc.kill()
        rank.proc.wait()
    killed_at = max(logged(f"{tmp_path / 'run'}.log", "train_inner"))
    assert SAVE_EVERY < killed_at < MLM_UPDATES
    assert updates_in(tmp_path / "run" / "checkpoint_last.pt") == SAVE_EVERY

    resumed = two_tasks(args[0], tmp_path / "run", slurm, *args[1:])
    assert [r.finish() for r in resumed] == [0, 0], resumed[0].output()
    loaded = f"Loaded checkpoint {tmp_path / 'run' / 'checkpoint_last.pt'} (epoch 1 @ {SAVE_EVERY} updates)"
    assert loaded in resumed[0].output(whole=True)
    uninterrupted = parameters(runs["sharded"] / "checkpoint_last.pt")
    after = parameters(tmp_path / "run" / "checkpoint_last.pt")
    assert all(torch.equal(uninterrupted[k], after[k]) for k in uninterrupted), "not bit-identical"
    # the resumed run logs updates SAVE_EVERY+1.. again (later lines win): the same losses as the
    # uninterrupted run
    assert losses(f"{tmp_path / 'run'}.log") == losses(f"{runs['sharded']}.log")


@pytest.mark.parametrize(
    "override, error",
    [
        (
            "distributed_training.cpu_offload=true",
            "distributed_training.cpu_offload: fairscale's options, which",
        ),
        (
            "precision=memory_efficient_bf16",
            "common.memory_efficient_bf16 with distributed_training.ddp_backend=fully_sharded: FSDP2 "
            "holds the fp32 master weights",
        ),
    ],
)
def test_fairscale_options_and_memory_efficient_precision_are_refused_in_one_line(
    override, error, data_bin, tmp_path
):
    """fairscale's own options would be ignored by FSDP2, and the memory-efficient precisions would
    save nothing (FSDP2 keeps fp32 master shards; fp16 and bf16 are tests/test_sharded_precision.py's):
    one line, status 1."""
    config, *overrides = mlm(data_bin, SHARDED, override)
    result = run_cli(hydra_command(config, tmp_path / "run", *overrides), cwd=tmp_path, check=False)
    assert result.returncode == 1 and result.stderr.strip().splitlines()[-1].startswith(
        error
    ), result.stderr[-2000:]
