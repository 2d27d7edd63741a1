"""hydra imports every module of the ``hydra_plugins`` namespace when it starts, before it composes
the config: in fairseq-hydra-train (and only there) this one makes composition errors one line, and
gives each job of a sweep (``-m``) its recipe's paper table as a single run's callback does
(``fairseq_bio.patches.hydra_overrides``, ``fairseq_bio.runner.paper_callback``). Other hydra
programs in the environment import it and nothing happens: it imports nothing else for them."""

import os
import sys

if os.path.basename(sys.argv[0]) in ("fairseq-hydra-train", "hydra_train.py"):
    from fairseq_bio.patches.hydra_overrides import install
    from fairseq_bio.runner.paper_callback import apply_to_sweep_job

    install(per_job=[apply_to_sweep_job])
