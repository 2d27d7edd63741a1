"""hydra imports every module of the ``hydra_plugins`` namespace when it starts, before it composes
the config: in fairseq-hydra-train (and only there) this one makes composition errors one line
(``fairseq_bio.patches.hydra_overrides``). Other hydra programs in the environment import it and
nothing happens: it imports nothing else for them."""

import os
import sys

if os.path.basename(sys.argv[0]) in ("fairseq-hydra-train", "hydra_train.py"):
    from fairseq_bio.patches.hydra_overrides import install

    install()
