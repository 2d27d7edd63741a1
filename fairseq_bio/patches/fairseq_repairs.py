"""Narrow repairs of fairseq 0.12 breaks that are not the plugin's own: each ``_install_*`` function
says what it repairs; docs/stack.md has the table of them with their tests."""

import copy
import functools
import os
import types

from omegaconf import open_dict


def install() -> None:
    """Make every repair below. Idempotent."""
    _install_cpu_ddp()
    _install_cpu_slurm_device()
    _install_composite_weight_decay_scale()
    _install_one_log_file_handler()
    _install_installed_user_dir()
    _install_numpy1_names()
    _install_masked_lm_dictionary_load()


# The names numpy 2 removed that the installed fairseq uses, per module (fairseq/examples/ is left
# alone: no fairseq_bio workflow imports it). tests/test_fairseq_peer.py derives this table again
# from the installed fairseq source, so it can grow neither broader nor stale.
NUMPY1_NAMES = {
    "fairseq.data.data_utils": ("int",),
    "fairseq.data.language_pair_dataset": ("compat",),
    "fairseq.data.token_block_dataset": ("compat",),
    "fairseq.modules.dynamic_crf_layer": ("float",),
}


def _numpy1_value(name):
    """numpy 1's value of a removed name: ``np.int``/``np.float`` were the builtins,
    ``np.compat.long`` was int."""
    if name == "compat":
        module = types.ModuleType(
            "numpy.compat", "numpy 1's numpy.compat, reduced to what fairseq uses."
        )
        module.long = int
        return module
    return {"int": int, "float": float}[name]


def _numpy_with(names):
    """A view of numpy that adds ``names`` with their numpy-1 values; every other name is numpy's
    own."""
    import numpy

    view = types.ModuleType(
        "numpy",
        f"numpy plus numpy 1's {', '.join(names)} for fairseq (fairseq_bio.patches.fairseq_repairs).",
    )
    # PEP 562: consulted only for names the view lacks, so every other lookup is numpy's own,
    # current attribute.
    view.__getattr__ = functools.partial(getattr, numpy)
    for name in names:
        setattr(view, name, _numpy1_value(name))
    view.fairseq_bio_numpy1_names = tuple(names)
    return view


def _install_numpy1_names():
    """numpy 2 removed names fairseq still uses (``NUMPY1_NAMES``). numpy itself is left unchanged:
    each of those fairseq modules gets, as its ``np`` global, a view of numpy that adds exactly the
    names that module uses, with numpy 1's values (the builtins ``int``/``float``, and a ``compat``
    holding only ``long = int``); every other name is numpy's own. Two of the four code paths still
    fail further on, for other reasons (docs/stack.md).
    """
    import importlib

    for module_name, names in NUMPY1_NAMES.items():
        module = importlib.import_module(module_name)
        if getattr(module.np, "fairseq_bio_numpy1_names", None) != names:
            module.np = _numpy_with(names)


def _masked_lm_dictionary_load(cls, f, add_special_symbols=True):
    """fairseq 0.12.2's ``Dictionary.load`` for the legacy dictionaries: their special symbols, then
    ``f``'s entries."""
    if not add_special_symbols:
        raise ValueError(
            f"{f}: {cls.__name__} always adds its special symbols; add_special_symbols=False"
        )
    d = cls()
    d.add_from_file(f)
    return d


def _install_masked_lm_dictionary_load():
    """fairseq's ``Dictionary.load`` passes ``add_special_symbols`` to ``cls()`` since upstream
    commit 728b9470 (MMS release, May 2023, still on main), but the legacy
    ``MaskedLMDictionary``/``BertDictionary`` constructors do not take it, so ``cross_lingual_lm``,
    ``legacy_masked_lm`` and ``translation_from_pretrained_xlm`` crash on load.
    ``MaskedLMDictionary`` gets back fairseq 0.12.2's ``load`` (``cls()`` then ``add_from_file``).
    """
    from fairseq.data.legacy.masked_lm_dictionary import MaskedLMDictionary

    # A fairseq that fixed it (its own load, or a constructor that takes the flag) is left alone.
    if (
        "load" in vars(MaskedLMDictionary)
        or "add_special_symbols" in MaskedLMDictionary.__init__.__code__.co_varnames
    ):
        return
    MaskedLMDictionary.load = classmethod(_masked_lm_dictionary_load)  # BertDictionary inherits it


def _install_one_log_file_handler():
    """fairseq's ``progress_bar()`` adds a ``FileHandler`` for ``common.log_file`` on every call,
    and fairseq-train calls it once per epoch, so epoch k's log lines are written k times (quadratic
    growth on small fine-tuning sets). It now adds the handler only when that file has none yet."""
    from fairseq.logging import progress_bar as module

    original = module.progress_bar
    if getattr(original, "fairseq_bio_one_handler", False):
        return

    @functools.wraps(original)
    def progress_bar(*args, log_file=None, **kwargs):
        if log_file is not None:
            path = os.path.abspath(log_file)
            if any(getattr(h, "baseFilename", None) == path for h in module.logger.handlers):
                log_file = None  # already written by the handler an earlier epoch's bar added
        return original(*args, log_file=log_file, **kwargs)

    progress_bar.fairseq_bio_one_handler = True
    module.progress_bar = progress_bar


def _install_installed_user_dir():
    """The shipped configs name the plugin ``user_dir: fairseq_bio``, which fairseq reads as a path:
    relative to the working directory, else to fairseq's own (``fairseq/../fairseq_bio``: the plugin
    in site-packages after a non-editable ``pip install``, which fairseq then refuses as "not
    globally unique", because the configs' hydra callback has already imported it from the same
    directory spelt without the ``fairseq/..``); anywhere else, a ``FileNotFoundError``. A
    ``user_dir`` that is this plugin's own directory, however spelt, and a bare ``fairseq_bio`` that
    names no directory at all (a run started outside the checkout), are now this plugin, already
    imported, so that the shipped configs work from any working directory; any other goes to
    fairseq.
    """
    from fairseq import utils

    original = utils.import_user_module
    if getattr(original, "fairseq_bio_installed_user_dir", False):
        return
    here = os.path.realpath(os.path.dirname(os.path.dirname(__file__)))  # the plugin's package

    @functools.wraps(original)
    def import_user_module(args):
        user_dir = getattr(args, "user_dir", None)
        if user_dir is not None:
            fairseq_dir = os.path.dirname(utils.__file__)
            candidates = (
                os.path.abspath(user_dir),
                os.path.join(fairseq_dir, user_dir),
                os.path.join(fairseq_dir, "..", user_dir),
            )  # fairseq's own search order
            found = next((c for c in candidates if os.path.exists(c)), None)
            if found is not None and os.path.realpath(found) == here:
                return
            if found is None and os.path.normpath(user_dir) == os.path.basename(here):
                return  # the configs' name for the plugin, found nowhere as a path
        return original(args)

    import_user_module.fairseq_bio_installed_user_dir = True
    utils.import_user_module = import_user_module


def _install_composite_weight_decay_scale():
    """Two bugs of fairseq's composite optimizer (fairseq/optim/composite.py,
    ``FairseqCompositeOptimizer``):

    - it reads a parameter's ``optim_overrides["optimizer"]["weight_decay_scale"]`` but never
      applies it (the branch tests for a key ``"optimizer_config"`` that no optimizer config has).
      Applied here where each group's optimizer is built, so that fine-tuning can exempt biases and
      LayerNorm weights (``fine_tuning.exempt_from_weight_decay``);
    - its ``optimizers`` and ``lr_schedulers`` are class attributes (mutable dicts), so a second
      instance in one process also steps the first one's parameters; each instance gets its own
      here."""
    from fairseq.optim import composite

    build = composite._build_optimizer
    if getattr(build, "fairseq_bio_weight_decay_scale", False):
        return
    init = composite.FairseqCompositeOptimizer.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        self.optimizers, self.lr_schedulers = {}, {}
        init(self, *args, **kwargs)

    composite.FairseqCompositeOptimizer.__init__ = __init__

    @functools.wraps(build)
    def _build_optimizer(optimizer_config, params, *args, **kwargs):
        params = list(params)
        overrides = (
            (getattr(params[0], "optim_overrides", None) or {}).get("optimizer", {})
            if params
            else {}
        )
        scale = overrides.get("weight_decay_scale")
        if scale is not None and "weight_decay" in optimizer_config:
            optimizer_config = copy.deepcopy(optimizer_config)
            with open_dict(optimizer_config):
                optimizer_config.weight_decay = optimizer_config.weight_decay * scale
        return build(optimizer_config, params, *args, **kwargs)

    _build_optimizer.fairseq_bio_weight_decay_scale = True
    composite._build_optimizer = _build_optimizer


def _install_cpu_slurm_device():
    """Under SLURM with several tasks on a node, fairseq takes each task's device from
    ``SLURM_LOCALID`` and calls ``torch.cuda.set_device`` with it when it is above 0, also where
    torch has no CUDA: task 1 of a CPU job (gloo) stopped in ``infer_init_method``. Without CUDA the
    device is now 0; with CUDA nothing changes.
    """
    from fairseq.distributed import utils

    original = utils._infer_slurm_init
    if getattr(original, "fairseq_bio_cpu_slurm_device", False):
        return

    @functools.wraps(original)
    def _infer_slurm_init(cfg, num_pipelines_per_node):
        found = original(cfg, num_pipelines_per_node)
        import torch

        if found and not torch.cuda.is_available():
            cfg.device_id = 0  # SLURM_LOCALID names a GPU; a CPU task has none
        return found

    _infer_slurm_init.fairseq_bio_cpu_slurm_device = True
    utils._infer_slurm_init = _infer_slurm_init


def _install_cpu_ddp():
    """fairseq's ``DistributedFairseqModel`` gives torch's ``DistributedDataParallel``
    ``device_ids=[device_id]`` even for a model on the CPU, which torch refuses, so
    ``common.cpu=true`` training on several processes (gloo) cannot start. A CPU model now gets
    ``device_ids=None`` (what torch asks for CPU modules); GPU models are unchanged.
    """
    from fairseq.models import distributed_fairseq_model as wrapper

    if getattr(wrapper.DistributedDataParallel, "fairseq_bio_cpu_ddp", False):
        return

    class DistributedDataParallel(wrapper.DistributedDataParallel):
        """torch's DDP, given no device ids for a module on the CPU (fairseq passes ``[device_id]``
        regardless)."""

        fairseq_bio_cpu_ddp = True

        def __init__(self, module, *args, device_ids=None, output_device=None, **kwargs):
            if all(p.device.type == "cpu" for p in module.parameters()):
                device_ids = output_device = None
            super().__init__(
                module, *args, device_ids=device_ids, output_device=output_device, **kwargs
            )

    wrapper.DistributedDataParallel = DistributedDataParallel
