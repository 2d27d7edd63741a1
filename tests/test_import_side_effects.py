"""What ``import fairseq_bio`` changes in fairseq, torch and the interpreter: exactly the listed attributes.

``compat.install()`` (run at import) repairs fairseq 0.12 where it breaks and adds the plugin's reliability layer by
replacing attributes of fairseq/torch modules. Each replacement is named here, with the module of ours that makes
it, and in the docs (docs/stack.md); one more or one fewer fails this test until both are updated.
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# attribute (module.name[.class attribute]) -> the fairseq_bio module that replaces it
EXPECTED = {
    "fairseq.checkpoint_utils.PathManager": "checkpoints",  # local copies appear atomically
    "fairseq.checkpoint_utils.load_checkpoint": "checkpoints",  # clears *.pt.tmp, optional fallback to intact
    "fairseq.checkpoint_utils.load_checkpoint_to_cpu": "checkpoints",  # names a corrupt/unsafe file in one line
    "fairseq.checkpoint_utils.save_checkpoint": "preemption",  # records saves for the pre-emption exit
    "fairseq.checkpoint_utils.torch_persistent_save": "checkpoints",  # fsync + rename
    "fairseq.data.data_utils.np": "compat",  # numpy-1 names fairseq still uses
    "fairseq.data.language_pair_dataset.np": "compat",
    "fairseq.data.token_block_dataset.np": "compat",
    "fairseq.modules.dynamic_crf_layer.np": "compat",
    "fairseq.data.legacy.masked_lm_dictionary.MaskedLMDictionary.load": "compat",  # fairseq 0.12.2's load
    "fairseq.logging.progress_bar.progress_bar": "compat",  # one log-file handler, not one per epoch
    "fairseq.models.distributed_fairseq_model.DistributedDataParallel": "compat",  # CPU models: device_ids=None
    "fairseq.optim.composite.FairseqCompositeOptimizer.__init__": "compat",  # per-group weight-decay scale
    "fairseq.optim.composite._build_optimizer": "compat",
    "fairseq.optim.dynamic_loss_scaler.DynamicLossScaler.check_overflow": "fp16_diagnosis",  # names the overflow
    "fairseq.utils.import_user_module": "compat",  # the installed plugin as --user-dir, from anywhere
    "fairseq_cli.train.Trainer": "sharded",  # ddp_backend=fully_sharded on PyTorch's FSDP2 (fairscale: CUDA only)
    "fairseq_cli.train.fsdp_enable_wrap": "sharded",  # no fairscale wrapping: the Trainer shards the plain model
    "fairseq_cli.train.train": "preemption",  # signal handlers during training
    "fairseq_cli.train.validate_and_save": "preemption",  # save and leave on a signal
    "sys.excepthook": "errors",  # a BioError prints as one line
    "torch._weights_only_unpickler._marked_safe_globals_set": "compat",  # fairseq's checkpoint classes allowlisted
}

PROBE = textwrap.dedent("""
    import importlib, inspect, json, os, signal, sys

    ROOTS = ("fairseq", "fairseq_cli", "torch", "numpy", "omegaconf", "hydra")

    def watched(name):
        return name.split(".")[0] in ROOTS

    def snapshot():
        state = {}
        for module in {id(m): m for m in list(sys.modules.values()) if m is not None}.values():
            name = getattr(module, "__name__", None)
            if not isinstance(name, str) or not watched(name):
                continue
            try:
                items = list(vars(module).items())
            except TypeError:
                continue
            for attr, value in items:
                state[f"{name}.{attr}"] = id(value)
                if inspect.isclass(value) and getattr(value, "__module__", None) == name:
                    for class_attr, class_value in list(vars(value).items()):
                        state[f"{name}.{attr}.{class_attr}"] = id(class_value)
        state["sys.excepthook"] = id(sys.excepthook)
        for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT):
            state[f"signal.{sig.name}"] = id(signal.getsignal(sig))
        state.update({f"os.environ[{k}]": hash(v) for k, v in os.environ.items()})
        return state

    if sys.argv[1] == "modules":
        import fairseq_bio
        print(json.dumps(sorted(n for n in sys.modules if watched(n))))
    else:
        for name in json.loads(sys.argv[2]):
            try:
                importlib.import_module(name)
            except Exception:
                pass
        before = snapshot()
        import fairseq_bio
        after = snapshot()
        print(json.dumps(sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))))
    """)


def probe(*args) -> list:
    out = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_replaces_exactly_the_listed_attributes():
    # Every fairseq/torch module the plugin's import loads is imported first, so that a replacement in any of them
    # shows as a changed attribute (and a new attribute of an existing module or class as one too).
    modules = probe("modules")
    changed = set(probe("diff", json.dumps(modules)))
    assert changed - set(EXPECTED) == set(), "import fairseq_bio replaces attributes not listed in EXPECTED"
    assert set(EXPECTED) - changed == set(), "listed in EXPECTED, but import fairseq_bio no longer replaces them"


def test_every_replaced_attribute_is_documented():
    docs = (REPO / "README.md").read_text(encoding="utf-8") + "".join(
        p.read_text(encoding="utf-8") for p in sorted((REPO / "docs").glob("*.md"))
    )
    missing = [name for name in EXPECTED if f"`{name}`" not in docs]
    assert not missing, f"not in README.md or docs/*.md (as `name`): {missing}"


def test_each_listed_module_exists():
    for module in set(EXPECTED.values()):
        assert (REPO / "fairseq_bio" / f"{module}.py").is_file(), module
