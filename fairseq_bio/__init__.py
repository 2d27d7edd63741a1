"""fairseq_bio: biomedical language models as a fairseq ``--user-dir`` plugin.

Importing registers the plugin's components with fairseq (and fairseq's checkpoint classes with torch's
``weights_only`` loader, see ``compat``) and makes an uncaught plugin error print as one line (``errors``); nothing
else happens at import.
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
