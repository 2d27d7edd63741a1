"""Every change the plugin makes to fairseq, torch and the interpreter, and the trainer pieces that
replace fairseq's.

``install()`` makes them, in the order of docs/stack.md's table ("What `import fairseq_bio`
changes"), which says for each what it fixes, why it must happen at import, and its test. Nothing
outside this folder assigns to an attribute of fairseq or torch (tests/test_import_side_effects.py
reads the code for it).
"""

import warnings

# fairscale 0.4.13 (no longer used: fully sharded runs are PyTorch FSDP2, see sharded.py;
# environments that installed an earlier requirements/gpu.txt still have it) calls torch's
# deprecated torch.cuda.amp.custom_fwd/bwd when fairseq imports it: two FutureWarnings on stderr for
# every command, nothing a user can act on. Only fairscale's own FutureWarnings are hidden, before
# the imports below bring fairseq in.
warnings.filterwarnings("ignore", category=FutureWarning, module=r"fairscale\.")

from . import (  # noqa: E402
    checkpoint_safety,
    excepthook,
    fairseq_repairs,
    fp16_diagnosis,
    preemption,
    settings_check,
    sharded,
    trainer,
)


def install() -> None:
    """Make the changes of docs/stack.md's table, in its order. Idempotent; run when the plugin is
    imported."""
    fairseq_repairs.install()
    checkpoint_safety.install()
    fp16_diagnosis.install()
    preemption.install()
    settings_check.install()
    sharded.install()
    trainer.install()
    excepthook.install()
