"""The SLURM presets (hydra_configs/run_config/slurm_*) compose with the paper recipes as
fairseq-hydra-train composes them, take the cluster from FAIRSEQ_BIO_SLURM_* variables (never a
hard-coded name), and give submitit's real SLURM executor the sbatch script we mean; every
fairseq-hydra-train command in examples/ composes (docs cannot rot)."""

import re
import shlex

import pytest
import yaml
from conftest import REPO
from helpers.hydra_configs import CONFIG_DIR, composer, job_config
from omegaconf import OmegaConf

ENV = (
    "PARTITION",
    "ACCOUNT",
    "QOS",
    "CONSTRAINT",
    "GRES",
    "CPUS_PER_TASK",
    "MEM_GB",
    "TIMEOUT_MIN",
    "LOG_DIR",
    "PORT",
)
SHAPES = {"slurm_1x1": (1, 1), "slurm_1x8": (1, 8), "slurm_2x8": (2, 8), "slurm_4x8": (4, 8)}
# What each config needs from the user (its ??? values).
REQUIRED = {
    "bio_roberta_base": ["task.data=/data"],
    "bio_roberta_large": ["task.data=/data"],
    "bio_electra_base": ["task.data=/data"],
    "distill_tinybiobert": ["task.data=/data", "criterion.teacher=/teacher.pt"],
    "bio_tagging_ner": ["task.data=/data", "checkpoint.restore_file=/encoder.pt"],
}


@pytest.fixture(scope="module")
def compose():
    with composer() as composed:
        yield composed


@pytest.fixture
def no_cluster_env(monkeypatch):
    for key in ENV:
        monkeypatch.delenv(f"FAIRSEQ_BIO_SLURM_{key}", raising=False)
    return monkeypatch


def launcher_params(cfg):
    """The parameters hydra's SlurmLauncher is built with (resolved as it resolves them, on the
    submitting side)."""
    from hydra.utils import instantiate

    launcher = instantiate(cfg.hydra.launcher)
    assert type(launcher).__name__ == "SlurmLauncher"
    return launcher.params


def sbatch_script(params, srun_dir, monkeypatch):
    """The sbatch script submitit's SLURM executor writes for these launcher parameters, built as
    hydra_submitit_launcher 1.2.0's SlurmLauncher.launch() builds its executor just before it calls
    sbatch.
    """
    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

    # submitit refuses to build a SLURM executor where `srun` is not on PATH; nothing here runs it.
    (srun_dir / "srun").write_text("#!/bin/sh\nexit 1\n")
    (srun_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{srun_dir}:{__import__('os').environ['PATH']}")
    executor = submitit.AutoExecutor(
        cluster="slurm",
        folder=params["submitit_folder"],
        slurm_max_num_timeout=params["max_num_timeout"],
    )
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    executor.update_parameters(
        **{
            k if k in base else f"slurm_{k}": v
            for k, v in params.items()
            if k not in ("submitit_folder", "max_num_timeout")
        }
    )
    slurm = executor._executor
    return slurm._make_submission_file_text(slurm._submitit_command_str, "uid")


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_every_preset_composes_with_the_recipe(name, compose, no_cluster_env):
    """Each shape x each precision: submitit's SLURM launcher, one task per GPU, the world size
    fairseq checks against SLURM_NTASKS_PER_NODE, a rendezvous port, the precision switch, requeue
    on time-out."""
    plain = job_config(compose(name, REQUIRED[name]))
    for i, (shape, (nodes, gpus)) in enumerate(sorted(SHAPES.items())):
        precision = ("fp16", "bf16")[i % 2]
        cfg = compose(name, REQUIRED[name] + [f"run_config={shape}", f"precision={precision}"])
        params = launcher_params(cfg)
        assert (params["nodes"], params["gpus_per_node"], params["tasks_per_node"]) == (
            nodes,
            gpus,
            gpus,
        ), shape
        assert (
            params["timeout_min"] == 1440
            and params["mem_gb"] == 0
            and params["cpus_per_task"] == 10
        )
        assert params["signal_delay_s"] == 120 and params["max_num_timeout"] == 30
        assert all(params[k] is None for k in ("partition", "account", "qos", "constraint", "gres"))
        assert (
            params["submitit_folder"].startswith(f"slurm_logs/{name}/") and params["name"] == name
        )
        assert cfg.hydra.job.chdir is False
        job = job_config(cfg)
        dist = job.distributed_training
        assert dist.distributed_world_size == nodes * gpus and dist.distributed_port == 29500
        assert (job.common.fp16, job.common.bf16) == (precision == "fp16", precision == "bf16")
        # the recipe itself is untouched by the launcher
        assert (
            job.task == plain.task
            and job.model == plain.model
            and job.optimization == plain.optimization
        )


def test_cluster_settings_come_from_the_environment_into_sbatch(compose, no_cluster_env, tmp_path):
    env = {
        "PARTITION": "gpu-long",
        "ACCOUNT": "proj42",
        "QOS": "high",
        "CONSTRAINT": "a100&ib",
        "GRES": "gpu:a100:8",
        "CPUS_PER_TASK": "16",
        "MEM_GB": "480",
        "TIMEOUT_MIN": "2880",
        "LOG_DIR": str(tmp_path / "logs"),
        "PORT": "31337",
    }
    for key, value in env.items():
        no_cluster_env.setenv(f"FAIRSEQ_BIO_SLURM_{key}", value)
    cfg = compose("bio_roberta_base", ["task.data=/data", "run_config=slurm_2x8", "precision=bf16"])
    params = launcher_params(cfg)
    assert (params["partition"], params["account"], params["qos"]) == ("gpu-long", "proj42", "high")
    assert (params["constraint"], params["gres"]) == ("a100&ib", "gpu:a100:8")
    assert (params["cpus_per_task"], params["mem_gb"], params["timeout_min"]) == (16, 480, 2880)
    assert job_config(cfg).distributed_training.distributed_port == 31337
    script = sbatch_script(params, tmp_path, no_cluster_env)
    flags = set(re.findall(r"^#SBATCH (.*)$", script, re.M))
    for flag in (
        "--partition=gpu-long",
        "--account=proj42",
        "--qos=high",
        "--constraint='a100&ib'",
        "--gres=gpu:a100:8",
        "--nodes=2",
        "--ntasks-per-node=8",
        "--gpus-per-node=8",
        "--cpus-per-task=16",
        "--mem=480GB",
        "--time=2880",
        "--signal=USR2@120",
        "--job-name=bio_roberta_base",
    ):
        assert flag in flags, (flag, script)
    out = next(f for f in flags if f.startswith("--output="))
    assert out.startswith(f"--output={tmp_path}/logs/bio_roberta_base/") and out.endswith(
        "/submitit/%j/%j_0_log.out"
    )
    assert "srun --unbuffered" in script and "-m submitit.core._submit" in script


def test_without_the_environment_sbatch_names_no_cluster(compose, no_cluster_env, tmp_path):
    cfg = compose("bio_tagging_ner", REQUIRED["bio_tagging_ner"] + ["run_config=slurm_1x1"])
    script = sbatch_script(launcher_params(cfg), tmp_path, no_cluster_env)
    flags = {f.split("=")[0] for f in re.findall(r"^#SBATCH (--[^\s]*)", script, re.M)}
    assert not flags & {"--partition", "--account", "--qos", "--constraint", "--gres"}
    assert {
        "--nodes",
        "--ntasks-per-node",
        "--gpus-per-node",
        "--mem",
        "--time",
        "--signal",
    } <= flags
    assert "#SBATCH --gpus-per-node=1" in script and "#SBATCH --mem=0GB" in script


def test_no_preset_hard_codes_a_cluster():
    """Partition, account, qos, constraint, gres, memory, time and log folder are environment
    variables with a default, in the one file the other shapes build on."""
    for path in sorted((CONFIG_DIR / "run_config").glob("slurm_*.yaml")):
        launcher = yaml.safe_load(path.read_text())["hydra"]["launcher"]
        for key in ("partition", "account", "qos", "constraint", "gres", "mem_gb", "timeout_min"):
            assert key not in launcher or str(launcher[key]).startswith(
                "${oc.env:FAIRSEQ_BIO_SLURM_"
            ), (path, key)


# ------------------------------------------------------------------------------------------------------- examples


def example_commands():
    """(file, argv) of every fairseq-hydra-train command in examples/*.md (continuations joined,
    comments dropped)."""
    commands = []
    for path in sorted((REPO / "examples").glob("*.md")):
        for block in re.findall(r"```bash\n(.*?)```", path.read_text(encoding="utf-8"), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                argv = shlex.split(line, comments=True)
                if argv and argv[0] == "fairseq-hydra-train":
                    commands.append((path.name, argv))
    return commands


def parse(argv):
    """(multirun, config name, overrides) of a fairseq-hydra-train command line; the config dir must
    be ours."""
    multirun, name, overrides, args = False, None, [], iter(argv[1:])
    for arg in args:
        if arg in ("-m", "--multirun"):
            multirun = True
        elif arg == "--config-dir":
            assert next(args).replace("$REPO/", "") == "hydra_configs"
        elif arg == "--config-name":
            name = next(args)
        else:
            assert not arg.startswith("-"), arg
            overrides.append(arg)
    return multirun, name, overrides


def expansions(overrides):
    """The first and the last job of a sweep (every override with its first / last value)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    sweeps = [
        (
            list(o.sweep_string_iterator())
            if o.is_sweep_override()
            else [o.input_line.split("=", 1)[1]]
        )
        for o in parsed
    ]
    keys = [o.input_line.split("=", 1)[0] for o in parsed]
    jobs = [
        [f"{k}={v[0]}" for k, v in zip(keys, sweeps)],
        [f"{k}={v[-1]}" for k, v in zip(keys, sweeps)],
    ]
    return jobs[:1] if jobs[0] == jobs[1] else jobs, max(map(len, sweeps))


SCALE_OUT = (
    "run_config=",
    "precision=",
    "optimization.update_freq=",
    "dataset.batch_size=",
    "distributed_training.",
)


def sequences_per_update(job):
    return (
        job.dataset.batch_size
        * job.optimization.update_freq[0]
        * job.distributed_training.distributed_world_size
    )


def test_every_example_command_composes(compose, no_cluster_env):
    from hydra.core.hydra_config import HydraConfig

    commands = example_commands()
    names = {parse(argv)[1] for _, argv in commands}
    # every paper recipe of the project has its command
    assert {
        "bio_roberta_base",
        "bio_roberta_large",
        "bio_electra_base",
        "bio_electra_base_512",
        "distill_biolm",
        "distill_distilbiobert",
        "distill_compactbiobert",
        "distill_tinybiobert",
        "bio_tagging_ner",
        "bio_sentence_prediction",
    } <= names
    recipe_batch = {}
    for source, argv in commands:
        multirun, name, overrides = parse(argv)
        where = f"{source}: {shlex.join(argv)[:160]}"
        cluster = any(o.startswith("run_config=slurm_") for o in overrides)
        assert (
            multirun == cluster
        ), f"{where}: a run_config=slurm_* line needs -m to submit (and only it)"
        jobs, width = expansions(overrides)
        save_dirs = set()
        for job_overrides in jobs:
            cfg = compose(name, job_overrides)
            HydraConfig.instance().set_config(
                cfg
            )  # ${hydra:job.override_dirname} in sweep save_dirs
            job = job_config(cfg)
            save_dirs.add(job.checkpoint.save_dir)
            recipe = (name, *(o for o in job_overrides if o.startswith("sentence_task=")))
            if (
                recipe not in recipe_batch
            ):  # the config's own batch: the command without what scales it out
                base = [o for o in job_overrides if not o.startswith(SCALE_OUT)]
                recipe_batch[recipe] = sequences_per_update(job_config(compose(name, base)))
            if cluster or job.distributed_training.distributed_world_size > 1:
                assert (
                    sequences_per_update(job) == recipe_batch[recipe]
                ), f"{where}: not the recipe's batch"
        if width > 1:
            assert len(save_dirs) == len(
                jobs
            ), f"{where}: the jobs of a sweep share one checkpoint.save_dir"
