"""What only a GPU shows: every training config through the real fairseq-hydra-train in fp16 and
bf16 on CUDA (part of `make gpu-check`, benchmarks/gpu_check.py), ~20 updates each on real data
slices: bio_roberta_base masked LM, ELECTRA phase 1 then phase 2 grown to 512 positions,
distillation from a teacher, NER tagging with layer-wise lr decay, sentence prediction (GAD),
extractive QA; a pre-emption signal whose checkpoint_last.pt resumes with the fp16 loss scale it had
reached; the HF export of an fp16-trained checkpoint equal to fairseq's logits in fp32.

Without CUDA these tests skip, saying so. ``GPU_CHECK_DRY=1`` runs them on the CPU at tiny sizes (2
x 64 encoders, 10 updates) so that their code paths cannot rot unnoticed between GPU loans (CI runs
it). fp16 needs CUDA in two places of fairseq 0.12, both avoided there:

- fairseq's FP16Optimizer keeps one flat fp32 master copy of all parameters by default, allocated on
  ``torch.cuda.current_device()`` (fairseq/optim/fp16_optimizer.py:38, ``build_fp32_params``), which
  a CPU-only torch cannot answer ("Torch not compiled with CUDA enabled"). The pretraining recipes
  (bio_lm and what builds on it: ELECTRA, distillation) use that flat copy; the fine-tuning recipes
  set ``common.fp16_no_flatten_grads=true`` (the composite optimizer needs one tensor per
  parameter), which keeps one fp32 copy per parameter and runs on CPU. So on CPU every fp16 run here
  adds ``common.fp16_no_flatten_grads=true``: the pretraining configs' flat copy (and the ELECTRA
  phase-2 growth of that flat optimizer state) is checked on CUDA only.
- after a gradient overflow, fairseq's trainer sets ``grad_norm = torch.tensor(0.0).cuda()``
  (fairseq/trainer.py:1023): on CPU an overflow ends the run. These tiny runs do not overflow
  (initial scale 128, or 4 in the resume test); on CUDA overflows are skipped updates, as fairseq
  intends.

Everything else of fp16 (the model and batches in half precision, the dynamic loss scaler, the loss
scale in the checkpoint and its restore) runs on CPU, so the dry mode keeps fp16 rather than
substituting fp32.
"""

import math
import os
import signal
import statistics

import pytest
import torch
from conftest import SHARED_DATA, build_once, logged, run_cli
from helpers.gpu_runs import (  # noqa: F401  (ncbi: a fixture)
    BATCH,
    BLOCK,
    CUDA,
    DEVICE,
    DRY,
    ELECTRA,
    ENCODER,
    FINE_TUNE,
    LAYERS,
    LR,
    ONE_PROCESS,
    STUDENT,
    UPDATES,
    ncbi,
    train,
)
from training_processes import Run, updates_in

from fairseq_bio import checkpoints
from fairseq_bio.patches import preemption

if not (CUDA or DRY):
    pytest.skip(
        "needs a CUDA GPU (make gpu-check); GPU_CHECK_DRY=1 runs it on the CPU",
        allow_module_level=True,
    )
pytestmark = pytest.mark.gpu

PRECISIONS = ("fp16", "bf16")
HALF = {"fp16": torch.float16, "bf16": torch.bfloat16}


def precision_overrides(precision):
    """The precision switch; on CPU fp16 with one fp32 master copy per parameter (see the module
    docstring)."""
    overrides = [f"precision={precision}"]
    if precision == "fp16" and not CUDA:
        overrides.append("common.fp16_no_flatten_grads=true")
    return overrides


def assert_trained_in(precision, log, checkpoint, updates, first=1):
    """Updates ``first..updates`` logged with finite losses, a loss scale in fp16 only, and the
    checkpoint's weights fp32 tensors holding ``precision`` values: the model ran in it. Returns
    (train_inner entries, checkpoint).
    """
    inner = logged(log, "train_inner")
    assert sorted(inner) == list(range(first, updates + 1))
    assert all(math.isfinite(float(e["loss"])) for e in inner.values()), inner
    assert all(("loss_scale" in e) == (precision == "fp16") for e in inner.values())
    state = checkpoints.load_checkpoint(checkpoint)
    assert state["cfg"]["common"][precision] is True and updates_in(checkpoint) == updates
    weights = [v for k, v in state["model"].items() if k.endswith("fc1.weight")]
    assert weights and all(w.dtype == torch.float32 for w in weights)
    assert all(torch.equal(w, w.to(HALF[precision]).float()) for w in weights)
    return inner, state


def losses(inner):
    return [float(inner[u]["loss"]) for u in sorted(inner)]


@pytest.fixture(scope="module", params=PRECISIONS)
def pretrained(request, data_bin, tmp_path_factory):
    """(precision, checkpoint_last.pt, json log) of bio_roberta_base trained UPDATES updates in that
    precision on the PubMed slice (built once per session, shared by the pytest-xdist workers): the
    encoder the other tests start from."""
    precision = request.param

    def build(directory):
        log = train(
            "bio_roberta_base",
            directory / "ckpt",
            f"task.data={data_bin('bytebpe')}",
            *ENCODER,
            f"task.tokens_per_sample={BLOCK}",
            f"dataset.batch_size={BATCH}",
            "optimization.update_freq=[1]",
            f"optimization.max_update={UPDATES}",
            f"optimization.lr=[{LR}]",
            "lr_scheduler.warmup_updates=3",
            # the masking these thresholds were set with (bio-lm's recipe now masks single tokens)
            "task.mask_whole_words=true",
            "dataset.max_valid_steps=5",
            *precision_overrides(precision),
        )
        return directory / "ckpt" / "checkpoint_last.pt", log

    checkpoint, log = build_once(tmp_path_factory, f"gpu-mlm-{precision}", build)
    return precision, checkpoint, log


def test_masked_lm_trains(pretrained):
    precision, checkpoint, log = pretrained
    inner, state = assert_trained_in(precision, log, checkpoint, UPDATES)
    trained = losses(inner)
    assert (
        statistics.mean(trained[-3:]) < trained[0] - 0.2
    ), trained  # from ~log2(V) towards the unigram entropy
    assert math.isfinite(float(logged(log, "valid")[UPDATES]["loss"]))
    assert state["cfg"]["model"]["_name"] == "bio_roberta_base"


@pytest.mark.parametrize("precision", PRECISIONS)
def test_electra_phase_1_then_phase_2_grown_to_512_positions(precision, data_bin, tmp_path):
    """bio_electra_base with 128 positions for UPDATES / 2 updates, then bio_electra_base_512
    restored from it (the README's two phases): the position table grows to 512 (+2) rows, the
    update count and Adam's moments carry on, and the optimizer state grows by exactly the new rows
    (fairseq's flat fp16 master copy on CUDA).
    """
    half = UPDATES // 2
    common = [
        f"task.data={data_bin('bytebpe')}",
        *ELECTRA,
        "optimization.update_freq=[1]",
        "dataset.disable_validation=true",
        *precision_overrides(precision),
    ]
    phase1 = tmp_path / "phase1"
    log1 = train(
        "bio_electra_base",
        phase1,
        *common,
        "model.max_positions=128",
        "task.tokens_per_sample=128",
        f"dataset.batch_size={BATCH}",
        f"optimization.max_update={half}",
    )
    _, first = assert_trained_in(precision, log1, phase1 / "checkpoint_last.pt", half)
    log2 = train(
        "bio_electra_base_512",
        tmp_path / "phase2",
        *common,
        f"dataset.batch_size={max(BATCH // 4, 2)}",
        f"checkpoint.restore_file={phase1 / 'checkpoint_last.pt'}",
        f"optimization.max_update={UPDATES}",
    )
    inner, second = assert_trained_in(
        precision, log2, tmp_path / "phase2" / "checkpoint_last.pt", UPDATES, half + 1
    )
    assert all(
        math.isfinite(float(e[k])) for e in inner.values() for k in ("gen_loss", "disc_loss")
    )
    assert second["cfg"]["task"]["tokens_per_sample"] == 512
    old = first["model"]["discriminator.embed_positions.weight"]
    grown = second["model"]["discriminator.embed_positions.weight"]
    assert old.shape[0] == 128 + 2 and grown.shape == (512 + 2, old.shape[1])
    assert (
        grown[:130] - old
    ).abs().max() < 1e-3  # phase 1's rows kept (a few steps in the lr warm-up since)

    def moments(state):
        adam = state["last_optimizer_state"]["state"]
        return {int(s["step"]) for s in adam.values()}, sum(
            s["exp_avg"].numel() for s in adam.values()
        )

    (steps1, size1), (steps2, size2) = moments(first), moments(second)
    assert steps1 == {half} and steps2 == {
        UPDATES
    }  # Adam's moments carried on (a reset would count half)
    assert size2 - size1 == (512 - 128) * old.shape[1]


def test_distillation_from_a_teacher(pretrained, data_bin, tmp_path):
    """distill_tinybiobert (embedding, hidden-state and attention-map MSE through the learned
    projections, and the KL of the outputs) from the pretrained encoder as teacher, a random
    student: every term finite, the loss falls, the teacher's file untouched, both projections saved
    with the criterion."""
    precision, teacher, _ = pretrained
    before = teacher.read_bytes()
    log = train(
        "distill_tinybiobert",
        tmp_path / "run",
        f"task.data={data_bin('bytebpe')}",
        f"criterion.teacher={teacher}",
        *STUDENT,
        f"task.tokens_per_sample={BLOCK}",
        f"dataset.batch_size={BATCH}",
        "optimization.update_freq=[1]",
        f"optimization.max_update={UPDATES}",
        f"optimization.lr=[{LR}]",
        "lr_scheduler.warmup_updates=3",
        "dataset.max_valid_steps=5",
        *precision_overrides(precision),
    )
    inner, state = assert_trained_in(
        precision, log, tmp_path / "run" / "checkpoint_last.pt", UPDATES
    )
    terms = ("kl_loss", "embed_loss", "hidden_loss", "attn_loss")
    assert all(math.isfinite(float(e[t])) for e in inner.values() for t in terms)
    trained = losses(inner)
    assert statistics.mean(trained[-3:]) < trained[0], trained
    assert teacher.read_bytes() == before
    # the recipe's two projections (seed 004 eq. 6's W_h and eq. 7's own W_e), saved with the
    # criterion
    projections = [
        "embed_projection.bias",
        "embed_projection.weight",
        "layer_projection.bias",
        "layer_projection.weight",
    ]
    assert sorted(state["criterion"]) == projections


def test_tagging_with_layer_wise_lr_decay(pretrained, ncbi, tmp_path):
    """bio_tagging_ner with task.layer_lr_decay=0.8 from the pretrained encoder: one learning rate
    per layer group, each 0.8 of the one above; the loss falls; dev entity F1 logged."""
    precision, encoder, _ = pretrained
    log = train(
        "bio_tagging_ner",
        tmp_path / "run",
        f"task.data={ncbi}",
        f"checkpoint.restore_file={encoder}",
        "task.layer_lr_decay=0.8",
        "dataset.batch_size=16",
        *FINE_TUNE,
        *precision_overrides(precision),
    )
    inner, _ = assert_trained_in(precision, log, tmp_path / "run" / "checkpoint_last.pt", UPDATES)
    # one learning rate per depth (a depth's parameters may be in several optimizer groups: decayed
    # or not)
    lrs = sorted(
        {float(v) for k, v in inner[UPDATES // 2].items() if k.startswith("lr_")}, reverse=True
    )
    assert len(lrs) == LAYERS + 2  # heads, each layer, embeddings
    assert all(b == pytest.approx(0.8 * a, rel=1e-3) for a, b in zip(lrs, lrs[1:])), lrs
    trained = losses(inner)
    assert statistics.mean(trained[-3:]) < trained[0], trained
    assert 0 <= float(logged(log, "valid")[UPDATES]["f1"]) <= 100


@pytest.fixture(scope="module")
def gad(tmp_path_factory):
    """The first 300 rows of real GAD train (the last 60 of them the dev split) and 50 test rows."""

    def build(out):
        train_rows = (
            (SHARED_DATA / "re" / "GAD" / "train.tsv").read_text(encoding="utf-8").splitlines(True)
        )
        (out / "train.tsv").write_text("".join(train_rows[:300]), encoding="utf-8")
        test_rows = (
            (SHARED_DATA / "re" / "GAD" / "test.tsv").read_text(encoding="utf-8").splitlines(True)
        )
        (out / "test.tsv").write_text("".join(test_rows[:51]), encoding="utf-8")  # with its header
        return out

    return build_once(tmp_path_factory, "gpu-gad", build)


def test_sentence_prediction(pretrained, gad, tmp_path):
    """bio_sentence_prediction sentence_task=re_gad (its @GENE$/@DISEASE$ markers added to the
    vocabulary) from the pretrained encoder: dev accuracy and F1 logged."""
    precision, encoder, _ = pretrained
    log = train(
        "bio_sentence_prediction",
        tmp_path / "run",
        "sentence_task=re_gad",
        f"task.data={gad}",
        "task.valid_from_train=60",
        f"checkpoint.restore_file={encoder}",
        "dataset.batch_size=16",
        *FINE_TUNE,
        *precision_overrides(precision),
    )
    assert_trained_in(precision, log, tmp_path / "run" / "checkpoint_last.pt", UPDATES)
    dev = logged(log, "valid")[UPDATES]
    assert 0 <= float(dev["accuracy"]) <= 100 and 0 <= float(dev["f1"]) <= 100


def test_extractive_qa(pretrained, tmp_path):
    """bio_extractive_qa on the suite's SQuAD-format questions on real PubMed abstracts
    (tests/data/qa; long contexts windowed): the BioASQ/SQuAD dev metrics logged."""
    from helpers.qa import METRICS, QA_DATA

    precision, encoder, _ = pretrained
    stride = [] if CUDA else ["task.doc_stride=32"]  # 128-position windows at tiny sizes
    log = train(
        "bio_extractive_qa",
        tmp_path / "run",
        f"task.data={QA_DATA}",
        f"checkpoint.restore_file={encoder}",
        *FINE_TUNE,
        "dataset.batch_size=8",
        *stride,
        *precision_overrides(precision),
    )
    assert_trained_in(precision, log, tmp_path / "run" / "checkpoint_last.pt", UPDATES)
    dev = logged(log, "valid")[UPDATES]
    assert all(0 <= float(dev[m]) <= 100 for m in METRICS)


def test_preemption_saves_and_the_same_command_resumes_with_the_loss_scale(data_bin, tmp_path):
    """fp16 masked LM, the loss scale starting at 4 and doubling every 4 clean updates: SIGTERM to
    the run's process group (as SLURM pre-empts) saves checkpoint_last.pt at the next update with
    the scale reached and ends the run with status 75; the same command resumes from it with that
    scale, not the initial one, to the end.
    """
    # Long enough for the signal to land before the end; on CPU short enough that the doubling scale
    # never overflows (an overflow needs CUDA there, see the module docstring): 4 * 2^6 at
    # update 24.
    total = 200 if CUDA else 24
    save_dir = tmp_path / "run"
    args = (
        "bio_roberta_base",
        save_dir,
        f"task.data={data_bin('bytebpe')}",
        *DEVICE,
        *ONE_PROCESS,
        *ENCODER,
        f"task.tokens_per_sample={BLOCK}",
        f"dataset.batch_size={BATCH}",
        "optimization.update_freq=[1]",
        f"optimization.max_update={total}",
        f"optimization.lr=[{LR}]",
        "lr_scheduler.warmup_updates=3",
        "dataset.disable_validation=true",
        "checkpoint.save_interval_updates=100000",
        *precision_overrides("fp16"),
        "common.fp16_init_scale=4",
        "common.fp16_scale_window=4",
    )
    run = Run.train(*args, session=True)
    run.wait_for_update(6)
    os.killpg(run.proc.pid, signal.SIGTERM)
    assert run.finish() == preemption.PREEMPTED_EXIT_STATUS, run.output()
    stopped = updates_in(save_dir / "checkpoint_last.pt")
    assert 6 <= stopped < total and max(logged(run.log, "train_inner")) == stopped
    scale = checkpoints.load_checkpoint(save_dir / "checkpoint_last.pt")["last_optimizer_state"][
        "loss_scale"
    ]
    assert (
        scale == float(logged(run.log, "train_inner")[stopped]["loss_scale"]) and scale > 4
    )  # doubled at update 4

    again = Run.train(*args)
    assert again.finish() == 0, again.output()
    loaded = f"Loaded checkpoint {save_dir / 'checkpoint_last.pt'} (epoch 1 @ {stopped} updates)"
    assert loaded in again.output(whole=True)
    resumed = logged(
        run.log, "train_inner"
    )  # the resumed run's lines come later in the same log, and win
    assert (
        sorted(resumed) == list(range(1, total + 1))
        and updates_in(save_dir / "checkpoint_last.pt") == total
    )
    assert float(resumed[stopped + 1]["loss_scale"]) == scale  # a scaler started afresh would say 4


@pytest.mark.parametrize("pretrained", ["fp16"], indirect=True)
def test_hf_export_of_an_fp16_checkpoint_gives_fairseqs_logits(pretrained, pubmed_corpus, tmp_path):
    """fairseq-bio-export-hf of the fp16-trained masked LM; transformers' AutoModelForMaskedLM and
    fairseq, both in fp32 on the CPU, give the same token ids and logits within 1e-4 (absolute; the
    export's own check uses the same) on 16 real PubMed sentences."""
    from helpers.hf_models import check_against_hf, real_sentences

    _, checkpoint, _ = pretrained
    out = tmp_path / "hf"
    printed = run_cli(
        ["fairseq-bio-export-hf", "--checkpoint", checkpoint, "--out", out], cwd=tmp_path
    ).stdout
    assert "RobertaForMaskedLM" in printed and "token ids equal fairseq's" in printed
    data = checkpoints.load_checkpoint(checkpoint)["cfg"]["task"]["data"]
    diff, _, model = check_against_hf(out, checkpoint, data, real_sentences(pubmed_corpus, 16))
    assert diff <= 1e-4 and next(model.parameters()).dtype == torch.float32
