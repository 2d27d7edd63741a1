"""fairseq_bio: biomedical language models as a fairseq ``--user-dir`` plugin.

Importing registers the plugin's tasks, models, criterions and optimizers with fairseq and makes the changes of
``patches`` (docs/stack.md, "What `import fairseq_bio` changes"): fairseq has no other hook for a ``--user-dir``
plugin, which fairseq-train, fairseq-validate and fairseq-hydra-train import before they run fairseq's own code.
"""

from . import patches

patches.install()

from . import criterions, models, optim, tasks  # noqa: E402, F401  (registration)
