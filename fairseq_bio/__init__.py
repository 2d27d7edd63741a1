"""fairseq_bio: biomedical language models as a fairseq ``--user-dir`` plugin.

Importing registers the plugin's tasks, models, criterions and optimizers with fairseq and makes the
changes of ``patches`` (docs/stack.md, "What `import fairseq_bio` changes"): fairseq has no other
hook for a ``--user-dir`` plugin, which fairseq-train, fairseq-validate and fairseq-hydra-train
import before they run fairseq's own code.

The one exception is a console script still reading its command line
(``fairseq_bio_preprocess.commands``): it registers once the arguments are read, so that ``--help``
and a mistyped option answer without torch or fairseq.
"""

import sys

# the console scripts' start, which may ask registration to wait
COMMANDS = "fairseq_bio_preprocess.commands"


def register() -> None:
    """Register the plugin with fairseq and make the changes of ``patches``; idempotent."""
    from . import patches

    patches.install()
    from . import criterions, models, optim, tasks  # noqa: F401  (registration)


if not getattr(sys.modules.get(COMMANDS), "reading_arguments", False):
    register()
