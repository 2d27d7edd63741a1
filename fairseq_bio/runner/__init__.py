"""fairseq-bio-blurb's library: one encoder fine-tuned and scored on every BLURB (or BLUE) dataset.

``datasets`` (the dataset table: benchmarks, metrics, recipes), ``plan`` (composed configs, budgets,
runs, the lock), ``execute`` (the processes of a run, its logs, its test score from the predictions),
``slurm`` (the runs as SLURM jobs, waited for) and ``report`` (the aggregate and results.md / .json
/ .png). ``fairseq_bio.cli.blurb`` is the command over them.
"""
