"""The console scripts of the corpus commands that do not train: ``fairseq-bio-extract``, ``-vocab``, ``-encode``,
``-convert-tagging`` and ``-vocab-report`` start without importing torch or fairseq.

They use the plugin's file, error and text modules (``fairseq_bio.files``, ``errors``, ``outputs``,
``data.sentence_splitter``, ``data.conll``, ``data.tokenizer_files``, ...), none of which needs torch or fairseq. But Python
runs a package's ``__init__`` before any of its modules, and ``fairseq_bio/__init__.py`` registers the plugin with
fairseq (which imports torch and fairseq: seconds, and the whole plugin, before a ``--help`` could print). A
``--user-dir`` plugin has no other place to register (fairseq imports the package and nothing else), so the package
keeps doing it, and these five scripts instead enter ``fairseq_bio`` without running its ``__init__``: the package
module is created from its spec but not executed, so that importing its modules works and registers nothing.

Only these scripts do this, and only when nothing imported ``fairseq_bio`` before: they are processes of their own
that never hand a model to fairseq. A module of theirs that does need fairseq (vocab-report's reading of a fairseq
dictionary) imports it when it runs, as any module does. The same commands' ``cli_main`` functions, called in a
process of one's own (tests, notebooks), import the plugin as usual.
"""

import importlib
import importlib.util
import sys
from typing import Callable


def _plugin_without_registration() -> None:
    if "fairseq_bio" in sys.modules:
        return
    spec = importlib.util.find_spec("fairseq_bio")
    sys.modules["fairseq_bio"] = importlib.util.module_from_spec(spec)  # not executed: registers nothing


def _started_light(module: str) -> Callable[[], None]:
    """The console-script function of ``module``'s ``cli_main``, entered as the module docstring says."""

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
