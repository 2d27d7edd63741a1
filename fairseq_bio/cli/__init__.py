"""Console scripts that are not preprocessing (HF import/export, ...), one module per command.

Never imported by the package ``__init__``: loading the plugin stays registration only.
"""
