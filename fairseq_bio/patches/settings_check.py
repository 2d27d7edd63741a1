"""``settings.check_settings`` run in fairseq-train's ``main`` right after fairseq has filled in the
registry defaults (``fairseq_cli.train.add_defaults``), before it makes the checkpoint directory,
the task, datasets or model; fairseq-train and fairseq-hydra-train both run that ``main``."""

import functools

from ..settings import check_settings

_MARK = "fairseq_bio_settings"


def _checking_settings(add_defaults):
    @functools.wraps(add_defaults)
    def checked(cfg):
        add_defaults(cfg)
        check_settings(cfg)

    setattr(checked, _MARK, True)
    return checked


def install() -> None:
    """Check the settings in fairseq-train's ``main`` as soon as fairseq has completed them (see the
    module docstring). Idempotent."""
    from fairseq_cli import train as module

    if not getattr(module.add_defaults, _MARK, False):
        module.add_defaults = _checking_settings(module.add_defaults)
