"""fairseq_bio: biomedical language models as a fairseq ``--user-dir`` plugin.

Importing registers the plugin's components with fairseq and makes the changes to fairseq, torch and the interpreter
listed, each with its reason and its test, in docs/stack.md ("What `import fairseq_bio` changes"; the fairscale
warning filter below is one of them): fairseq has no other hook for a ``--user-dir`` plugin, which fairseq-train,
fairseq-validate and fairseq-hydra-train import before they run fairseq's own code. ``compat.install()`` and
``errors.install()`` make them; tests/test_import_side_effects.py checks the list against what the import changes.
"""

import warnings

# fairscale 0.4.13 (no longer used: fully sharded runs are PyTorch FSDP2, see sharded.py; environments that installed
# an earlier requirements/gpu.txt still have it) calls torch's deprecated torch.cuda.amp.custom_fwd/bwd when fairseq
# imports it: two FutureWarnings on stderr for every command, nothing a user can act on, and they broke the commands'
# one-line errors. Only fairscale's own FutureWarnings are hidden.
warnings.filterwarnings("ignore", category=FutureWarning, module=r"fairscale\.")

from . import compat, errors  # noqa: E402

compat.install()
errors.install()

from . import criterions, models, optim, tasks  # noqa: E402  (registration)
