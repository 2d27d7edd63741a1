"""The repairs of fairseq 0.12 (fairseq_bio.patches.fairseq_repairs), each on fairseq's own code:
the log file written once per entry, the numpy 1 names fairseq uses, the installed plugin as a
relative user_dir, CPU data parallelism, a CPU task's device under SLURM, one composite optimizer
per job of a sweep; and the plugin's one warning filter (fairscale's). docs/stack.md's table of what
``import fairseq_bio`` changes names the test of each."""

import argparse
import json
import sys

import pytest
import torch
from conftest import REPO

from fairseq_bio import runs


def test_log_file_written_once_per_entry_across_epochs(tmp_path):
    """fairseq-train makes a progress bar per epoch with ``log_file``; each entry must still land in
    the file once."""
    import logging

    from fairseq.logging import progress_bar

    log_file = tmp_path / "train.log"
    level = progress_bar.logger.level
    progress_bar.logger.setLevel(logging.INFO)
    try:
        for epoch in (1, 2, 3):
            bar = progress_bar.progress_bar(
                iter([]), log_format="json", log_file=str(log_file), epoch=epoch
            )
            bar.print({"loss": float(epoch)}, tag="train", step=epoch)
    finally:
        progress_bar.logger.setLevel(level)
        for handler in [h for h in progress_bar.logger.handlers if h.baseFilename == str(log_file)]:
            progress_bar.logger.removeHandler(handler)
            handler.close()
    entries = [json.loads(line)["epoch"] for line in log_file.read_text().splitlines()]
    assert entries == [1, 2, 3]


def test_fairseq_code_that_uses_numpy1_names_runs_as_far_as_fairseq_lets_it():
    """fairseq_repairs.NUMPY1_NAMES at work in fairseq's own code (each call below fails on the
    removed numpy name without the plugin): TokenBlockDataset's eos mode and DynamicCRF run;
    compute_mask_indices(no_overlap=True) gets past np.int and stops at fairseq's own bug
    (``rng.randint`` on a numpy Generator); LanguagePairDataset's buckets stop before
    np.compat.long, at np.percentile(interpolation=...), which numpy 2.4 removed. docs/stack.md says
    so.
    """
    from fairseq.data import Dictionary, LanguagePairDataset, TokenBlockDataset
    from fairseq.data.data_utils import compute_mask_indices
    from fairseq.modules.dynamic_crf_layer import DynamicCRF

    blocks = TokenBlockDataset(
        [torch.tensor([5, 6, 2]), torch.tensor([7, 2])], [3, 2], None, 1, 2, break_mode="eos"
    )
    assert [blocks[i].tolist() for i in range(len(blocks))] == [[5, 6, 2], [7, 2]]
    torch.manual_seed(0)
    crf = DynamicCRF(10, low_rank=4, beam_size=4)
    assert crf(
        torch.randn(2, 5, 10), torch.randint(0, 10, (2, 5)), torch.ones(2, 5, dtype=torch.bool)
    ).shape == (2,)
    with pytest.raises(
        AttributeError,
        match="'numpy.random._generator.Generator' object has no attribute 'randint'",
    ):
        compute_mask_indices((2, 40), None, 0.3, 4, no_overlap=True)
    dictionary = Dictionary()
    with pytest.raises(TypeError, match="unexpected keyword argument 'interpolation'"):
        LanguagePairDataset(
            [torch.tensor([4, 2]), torch.tensor([2])], [2, 1], dictionary, num_buckets=2
        )


def test_the_installed_plugin_as_a_relative_user_dir_is_the_imported_one(tmp_path, monkeypatch):
    """After a non-editable install, fairseq finds the configs' relative ``user_dir: fairseq_bio``
    at ``fairseq/../fairseq_bio``, the plugin that the configs' hydra callback has already imported;
    fairseq alone refuses it there as "not globally unique"."""
    from fairseq import utils

    site = tmp_path / "site-packages"  # fairseq and the plugin side by side, as pip installs them
    (site / "fairseq").mkdir(parents=True)
    (site / "fairseq_bio").symlink_to(REPO / "fairseq_bio")
    monkeypatch.setattr(utils, "__file__", str(site / "fairseq" / "utils.py"))
    monkeypatch.setattr(
        utils.import_user_module, "memo", set(), raising=False
    )  # fairseq's record of imported dirs
    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(user_dir="fairseq_bio")
    utils.import_user_module(args)  # recognised as this plugin: nothing to import
    with pytest.raises(
        ImportError, match="not globally unique"
    ):  # (first: fairseq records the path before it raises)
        utils.import_user_module.__wrapped__(args)  # fairseq's own


@pytest.mark.filterwarnings(
    "ignore:`broadcast_buffers` is deprecated:FutureWarning"
)  # torch's, about fairseq's call
def test_a_cpu_task_under_slurm_keeps_device_0(monkeypatch, tmp_path):
    """srun gives the second task of a node ``SLURM_LOCALID=1``; fairseq takes it as the task's GPU
    and calls ``torch.cuda.set_device(1)``, which a CPU-only torch refuses: a CPU task keeps
    device 0 and its rank."""
    from fairseq.dataclass.configs import DistributedTrainingConfig
    from fairseq.distributed import utils
    from helpers.slurm import free_port, slurm_job
    from omegaconf import OmegaConf

    for name, value in slurm_job(tmp_path)(1).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SLURM_LOCALID", "1")  # what srun gives the node's second task
    assert not torch.cuda.is_available()
    cfg = OmegaConf.structured(
        DistributedTrainingConfig(distributed_world_size=2, distributed_port=free_port(), tpu=False)
    )
    utils.infer_init_method(cfg)
    assert (cfg.distributed_rank, cfg.device_id) == (1, 0)
    assert cfg.distributed_init_method.startswith("tcp://localhost:")


def test_a_cpu_model_gets_data_parallel_without_device_ids(tmp_path):
    """fairseq wraps every model for data parallelism with ``device_ids=[device_id]``, which torch
    refuses for a model on the CPU: ``common.cpu=true`` training on several processes (gloo) could
    not start."""
    from fairseq.models.distributed_fairseq_model import DistributedFairseqModel

    args = argparse.Namespace(
        tpu=False,
        ddp_backend="pytorch_ddp",
        device_id=0,
        broadcast_buffers=False,
        bucket_cap_mb=25,
        find_unused_parameters=False,
        gradient_as_bucket_view=False,
        ddp_comm_hook="none",
    )
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'group'}", rank=0, world_size=1
    )
    try:
        with pytest.raises(ValueError, match="device_ids"):
            torch.nn.parallel.DistributedDataParallel(
                torch.nn.Linear(2, 2), device_ids=[0], output_device=0
            )
        model = DistributedFairseqModel(args, torch.nn.Linear(2, 2), None, torch.device("cpu"))
        assert model.module.device_ids is None
        assert model(torch.ones(1, 2)).shape == (1, 2)
    finally:
        torch.distributed.destroy_process_group()


def _composite(model, lr=1e-3):
    """fairseq's composite optimizer with one default group of adam (as the fine-tuning recipes
    configure it)."""
    from fairseq.optim import build_optimizer
    from omegaconf import OmegaConf

    group = {
        "lr_float": lr,
        "optimizer": {"_name": "adam", "weight_decay": 0.0},
        "lr_scheduler": {"_name": "polynomial_decay", "total_num_update": 10, "lr": [lr]},
    }
    root = OmegaConf.create(
        {
            "common": {"tpu": False},
            "optimization": {"lr": [lr], "max_update": 10},
            "optimizer": {"_name": "composite", "groups": {"default": group}},
        }
    )
    for p in model.parameters():
        p.param_group = "default"
    return build_optimizer(root.optimizer, list(model.parameters()))


def test_each_composite_optimizer_steps_its_own_parameters():
    """fairseq's composite optimizer keeps its groups' optimizers in class attributes: a second one
    in the process (a fairseq-hydra-train -m sweep runs its jobs in one process) took over the first
    one's groups.
    """
    first, second = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    a, b = _composite(first), _composite(second)
    assert {id(p) for group in a.param_groups for p in group["params"]} == set(
        map(id, first.parameters())
    )
    assert {id(p) for group in b.param_groups for p in group["params"]} == set(
        map(id, second.parameters())
    )


def test_plugin_import_hides_only_fairscale_future_warnings():
    """fairscale 0.4.13 (still in environments that installed an earlier requirements/gpu.txt) warns
    about torch's deprecated amp decorators when it is imported; the plugin's commands import
    fairseq_bio before fairseq.
    """
    code = (
        "import warnings, fairseq_bio\n"
        "warnings.warn_explicit('fairscale', FutureWarning, 'f.py', 1, module='fairscale.nn.misc')\n"
        "warnings.warn_explicit('other', FutureWarning, 'g.py', 1, module='other.module')\n"
    )
    result = runs.capture([sys.executable, "-W", "default", "-c", code], check=True)
    assert "FutureWarning: other" in result.stderr and "fairscale" not in result.stderr
