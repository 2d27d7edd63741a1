"""Small builders shared by the unit tests (synthetic vocabularies only; real text comes from fixtures)."""

import argparse

from fairseq.data import Dictionary


def make_dictionary(symbols):
    """A fairseq dictionary with ``symbols`` (counts descending) and the ``<mask>`` the tasks add."""
    d = Dictionary()
    for i, s in enumerate(symbols):
        d.add_symbol(s, n=len(symbols) - i)
    mask = d.add_symbol("<mask>")
    return d, mask


class DictionaryTask:
    """The one thing a model's build_model needs from a task."""

    def __init__(self, dictionary):
        self.source_dictionary = dictionary
        self.target_dictionary = dictionary


def model_args(arch="bio_roberta_tiny", **overrides):
    """An argparse namespace as ``fairseq-train --arch <arch>`` would give the model."""
    args = argparse.Namespace(arch=arch, _name=arch, **overrides)
    from fairseq.models import ARCH_CONFIG_REGISTRY

    ARCH_CONFIG_REGISTRY[arch](args)
    return args
