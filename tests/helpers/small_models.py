"""Small builders shared by the unit tests: synthetic vocabularies, the 2-layer, 32-wide bio_roberta
and rows of its tokens (real text comes from fixtures)."""

import argparse

from fairseq.data import Dictionary


def make_dictionary(symbols):
    """A fairseq dictionary with ``symbols`` (counts descending) and the ``<mask>`` the tasks
    add."""
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


# The unit tests' small bio_roberta: 2 layers, 32 wide, over a 40-word synthetic vocabulary.
SMALL = dict(
    encoder_layers=2, encoder_embed_dim=32, encoder_ffn_embed_dim=64, encoder_attention_heads=4
)


def small_task() -> DictionaryTask:
    return DictionaryTask(make_dictionary([f"w{i}" for i in range(40)])[0])


def small_model(task, seed: int = 0, **overrides):
    """The ``SMALL`` bio_roberta (``overrides`` on top) built with torch seeded ``seed``, in eval
    mode."""
    import torch

    from fairseq_bio.models.bio_roberta import BioRobertaModel

    torch.manual_seed(seed)
    return BioRobertaModel.build_model(
        model_args("bio_roberta_tiny", **{**SMALL, **overrides}), task
    ).eval()


def build(task, load_checkpoint_heads=False, seed=0):
    """``small_model`` as the tagging-head tests build it (heads recreated from a state dict when
    asked)."""
    return small_model(task, seed, load_checkpoint_heads=load_checkpoint_heads)


def tokens(task, rows=3, length=9):
    """``rows x length`` random words between ``<s>`` and ``</s>``, the last row 5 long and
    padded."""
    import torch

    d = task.source_dictionary
    g = torch.Generator().manual_seed(1)
    t = torch.randint(d.nspecial, len(d) - 1, (rows, length), generator=g)
    t[:, 0], t[:, -1] = d.bos(), d.eos()
    t[-1, 5:] = d.pad()
    t[-1, 4] = d.eos()
    return t
