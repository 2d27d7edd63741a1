"""Corpus preprocessing for fairseq_bio: fetch -> extract -> vocab -> encode -> binarize.

Each step is a module with a plain function API and an argparse ``cli_main`` (console scripts
``fairseq-bio-extract``, ``fairseq-bio-vocab``, ``fairseq-bio-encode``, ``fairseq-bio-binarize``).
Every console script of the project, these and the plugin's, starts in ``commands``.
"""
