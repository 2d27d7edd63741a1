"""fairseq_bio: biomedical language models as a fairseq ``--user-dir`` plugin.

Importing registers the plugin's components with fairseq (and fairseq's checkpoint classes with torch's
``weights_only`` loader, see ``compat``) and makes an uncaught plugin error print as one line (``errors``); nothing
else happens at import.
"""

from . import compat, errors

compat.install()
errors.install()

from . import criterions, models, optim, tasks  # noqa: E402  (registration)
