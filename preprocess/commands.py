"""Every console script's start (setup.py's entry points): a script reads its command line before
the plugin registers with fairseq, so that ``--help`` and a mistyped option answer at once, without
torch or fairseq.

Registering (``fairseq_bio.register``) imports torch and fairseq, which takes seconds. While
``reading_arguments`` is true, importing ``fairseq_bio`` leaves registration for later (its
``__init__`` looks here), and the script's module gives its parser (``build_parser()``) importing
neither: tests/test_commands_start_light.py holds this for every script. Once the command line is
read, the script registers the plugin, unless it is a corpus command that needs no model, and runs
the module's ``cli_main``. Nothing else waits: any other import of ``fairseq_bio`` (fairseq's
``--user-dir``, a child process, a notebook, the tests) registers at once.
"""

import importlib
from typing import Callable

reading_arguments = False


def _script(module: str, plugin: bool = True) -> Callable[[], None]:
    """The console-script function of ``module`` (its ``build_parser`` and ``cli_main``; the
    function's ``module`` attribute names it); ``plugin``: whether the command registers the plugin
    before it runs."""

    def main() -> None:
        global reading_arguments
        reading_arguments = True
        try:
            command = importlib.import_module(module)
            # --help and a bad option end here, before registration
            command.build_parser().parse_args()
        finally:
            reading_arguments = False
        if plugin:
            import fairseq_bio

            fairseq_bio.register()
        command.cli_main()

    main.__name__ = module.rsplit(".", 1)[-1]
    main.module = module
    return main


extract = _script(f"{__package__}.extract", plugin=False)
vocab = _script(f"{__package__}.vocab", plugin=False)
encode = _script(f"{__package__}.encode", plugin=False)
convert_tagging = _script(f"{__package__}.convert_tagging", plugin=False)
vocab_report = _script(f"{__package__}.vocab_report", plugin=False)
binarize = _script(f"{__package__}.binarize")
demo = _script(f"{__package__}.demo")
predict = _script("fairseq_bio.cli.predict")
import_hf = _script("fairseq_bio.cli.import_hf")
export_hf = _script("fairseq_bio.cli.export_hf")
extract_encoder = _script("fairseq_bio.cli.extract_encoder")
init_student = _script("fairseq_bio.cli.init_student")
blurb = _script("fairseq_bio.cli.blurb")
config_dir = _script("fairseq_bio.cli.config_dir", plugin=False)
