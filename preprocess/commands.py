"""The console scripts of the corpus commands that do not train: ``fairseq-bio-extract``, ``-vocab``, ``-encode``,
``-convert-tagging`` and ``-vocab-report`` start without importing torch or fairseq.

They use only plugin modules that need neither, but ``fairseq_bio/__init__.py`` registers the
plugin with fairseq, which imports both. So these scripts enter ``fairseq_bio`` without running its
``__init__`` (``_plugin_without_registration`` says why that is safe); their ``cli_main``
functions, called in a process of one's own (tests, notebooks), import the plugin as usual.
"""

import importlib
import importlib.util
import sys
from typing import Callable


def _plugin_without_registration() -> None:
    """Make ``fairseq_bio`` importable without running its ``__init__``: the package module is
    created from its spec but not executed, so importing its modules works and registers nothing.

    Python runs a package's ``__init__`` before any of its modules, and registering imports torch
    and fairseq (seconds, before a ``--help`` could print). A ``--user-dir`` plugin has no other
    place to register, so the package keeps doing it. This is safe only in these scripts, and only
    when nothing imported ``fairseq_bio`` before: they are processes of their own that never hand a
    model to fairseq. A module of theirs that needs fairseq (vocab-report reading a fairseq
    dictionary) imports it when it runs."""
    if "fairseq_bio" in sys.modules:
        return
    spec = importlib.util.find_spec("fairseq_bio")
    sys.modules["fairseq_bio"] = importlib.util.module_from_spec(spec)  # not executed: registers nothing


def _started_light(module: str) -> Callable[[], None]:
    """The console-script function of ``module``'s ``cli_main``, entered without the plugin's
    registration."""

    def main() -> None:
        _plugin_without_registration()
        importlib.import_module(f"{__package__}.{module}").cli_main()

    main.__name__ = module
    return main


extract = _started_light("extract")
vocab = _started_light("vocab")
encode = _started_light("encode")
convert_tagging = _started_light("convert_tagging")
vocab_report = _started_light("vocab_report")
