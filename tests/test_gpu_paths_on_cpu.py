"""The code that runs only on a GPU in training, run on CPU tensors: the masked-LM head's padded
output matmul, fairseq's fp16/bf16 optimizer wrappers around the plugin's optimizers and parameters,
the fp16 loss scaler's overflow handling down to the diagnosis, and the fused attention against the
explicit one in bf16.

What fairseq 0.12 allows on CPU tensors (read in ``fairseq/optim/fp16_optimizer.py``,
``fairseq/trainer.py``, ``fairseq/optim/composite.py``, ``fairseq/optim/fairseq_optimizer.py``,
``fairseq/optim/adam.py``):

- fp16 and bf16 both run: torch's CPU kernels do the encoder's forward and backward in either dtype,
  and the wrappers depend on CUDA in one place: ``FP16Optimizer.build_fp32_params`` with
  ``flatten=True`` (one flat fp32 master tensor, the fp16 default) calls
  ``torch.cuda.current_device()`` (fp16_optimizer.py:38), so fp16 with flat grads needs CUDA.
  ``common.fp16_no_flatten_grads=true`` (one fp32 master tensor per parameter) runs on CPU; the
  fine-tuning recipe sets it anyway, since the composite optimizer needs more than one tensor
  (composite.py:60-62).
- bf16 never flattens (fp16_optimizer.py:299-300) and has no loss scaler
  (fp16_optimizer.py:279-289), so ``precision=bf16`` runs on CPU with every optimizer.
- ``MemoryEfficientFP16Optimizer`` (``memory_efficient_fp16`` / ``memory_efficient_bf16``) wraps
  only optimizers whose torch optimizer declares ``supports_memory_efficient_fp16``
  (fp16_optimizer.py:489-492, fairseq_optimizer.py:143-147): fairseq's ``adam`` does
  (adam.py:151-153), and so does ``composite`` when every group's optimizer does
  (composite.py:216-218), though composite's state then does not load back
  (fp16_optimizer.py:377-379 reads ``param_groups``, which composite's torch optimizer lacks);
  ``bio_adamw`` declares it and keeps fp32 moments for fp16/bf16 weights (torch's AdamW would keep
  them in the weights' dtype). Without an fp32 copy, an update smaller than half a unit in the last place of a weight
  is rounded away (bf16: 2^-9 to 2^-8 of it, so LayerNorm weights near 1 stay put at lr 1e-3).
- fairseq's trainer casts model and criterion with ``.half()`` / ``.to(torch.bfloat16)``
  (trainer.py:100-106) and builds the wrapper in ``_build_optimizer`` (trainer.py:322-338); both run
  on CPU, and so does ``train_step`` until a gradient overflows: its ``OverflowError`` handler calls
  ``torch.tensor(0.0).cuda()`` (trainer.py:1023). The overflow tests below therefore drive the
  trainer's wrapper by hand, as ``train_step`` does (trainer.py:843-975): ``optimizer.backward`` in
  the task's ``train_step`` (fairseq_task.py:536), ``multiply_grads(1 / sample_size)``,
  ``clip_grad_norm``, ``step``, and on ``OverflowError`` ``zero_grad`` and no step
  (trainer.py:1010-1024).
- ``FairseqCompositeOptimizer`` keeps its per-group ``optimizers`` and ``lr_schedulers`` in class
  attributes (composite.py:52-53) that every instance fills (composite.py:156-161): a second
  composite optimizer in the same process would step and clip the first one's groups too;
  ``fairseq_bio.patches.fairseq_repairs`` gives each instance its own.

CPU kernels are not CUDA's (no tensor cores; torch's CPU flash-attention kernel, not CUDA's): what
these tests pin down is the arithmetic fairseq and the plugin do around the kernels: padding, master
weights, loss scaling and unscaling, per-group learning rates, which parameters are optimised,
masking conventions.
"""

import copy

import pytest
import torch
from fairseq import metrics
from helpers.distillation import save_teacher
from helpers.hydra_configs import composed
from helpers.small_models import DictionaryTask, make_dictionary, model_args
from helpers.tensors import assert_same_gradients, close
from helpers.trainers import vocab_dir  # noqa: F401  (a fixture)
from helpers.trainers import CPU, SIZES, STEPS, TINY, WARMUP, pretraining_setup, text_batch

import fairseq_bio  # noqa: F401  (registration, the loss-scale diagnosis)
from fairseq_bio.data.tagging_dataset import IGNORE
from fairseq_bio.errors import BioError
from fairseq_bio.patches.fp16_diagnosis import LossScaleError
from fairseq_bio.models.bio_roberta import BioRobertaLMHead, BioRobertaModel


# --- 1. the masked-LM head's padded output matmul ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype, rtol", [(torch.float32, 1e-5), (torch.bfloat16, 2**-8)], ids=["fp32", "bf16"]
)
def test_padded_lm_head_equals_the_plain_one(dtype, rtol):
    """``BioRobertaLMHead(pad_on_cpu=True)`` (CUDA's path: the 50 x C output matrix padded to 64
    rows) and the plain head, same weights (the output matrix tied, as to the embeddings): the same
    50 logits and the same gradients of the weight, bias, dense, layer norm and input features. Each
    logit is its own dot product, so padding may change no more than the order of accumulation: fp32
    1e-5 of the largest value, bf16 one rounding, 2^-8 (measured on this CPU: equal in bf16, 5e-8 in
    fp32)."""
    torch.manual_seed(0)
    embed = torch.nn.Parameter(torch.randn(50, 32, dtype=dtype))
    padded = BioRobertaLMHead(32, 50, "gelu", weight=embed, vocab_multiple=64, pad_on_cpu=True).to(
        dtype
    )
    plain = BioRobertaLMHead(32, 50, "gelu", weight=embed, vocab_multiple=64).to(dtype)
    plain.load_state_dict(padded.state_dict())
    with torch.no_grad():
        # fairseq starts it at 0, where a wrong padding of the bias would not show
        padded.bias.normal_()
        plain.bias.copy_(padded.bias)
    features = torch.randn(3, 7, 32, dtype=dtype)
    masked = torch.rand(3, 7) < 0.5
    x_padded, x_plain = features.clone().requires_grad_(), features.clone().requires_grad_()

    logits = padded(x_padded, masked_tokens=masked)
    reference = plain(x_plain, masked_tokens=masked)
    # the padded matmul ran: 64 columns computed, 50 kept (torch records the slice's input size for
    # its backward)
    assert (
        logits.grad_fn.name() == "SliceBackward0" and logits.grad_fn._saved_self_sym_sizes[-1] == 64
    )
    assert reference.grad_fn.name() != "SliceBackward0"
    assert logits.shape == reference.shape == (int(masked.sum()), 50)
    close(logits.float(), reference.float(), rtol)

    g = torch.randn(logits.shape, dtype=dtype)
    grads_padded = torch.autograd.grad((logits * g).sum(), [x_padded, *padded.parameters()])
    grads_plain = torch.autograd.grad((reference * g).sum(), [x_plain, *plain.parameters()])
    names = ["features"] + [name for name, _ in padded.named_parameters()]
    assert {"weight", "bias", "dense.weight", "layer_norm.weight"} <= set(names)
    for name, a, b in zip(names, grads_padded, grads_plain):
        close(a.float(), b.float(), rtol, name=name)


# --- 2. fairseq's fp16 / bf16 optimizer wrappers around the plugin's optimizers ---------------------------------------


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    return save_teacher(tmp_path_factory.mktemp("teacher"))  # 2 x 32, the student below is 1 x 16


def tagging_setup(vocab_dir, save_dir, precision):
    """bio_tagging fine-tuning as shipped (composite optimizer, PubMedBERT's recipe) with
    BioELECTRA's layer-wise lr decay 0.8, on a tiny randomly initialised encoder: (cfg, task, model,
    criterion, sample)."""
    from fairseq import tasks

    cfg = composed(
        "bio_tagging_ner",
        f"precision={precision}",
        f"task.data={vocab_dir}",
        f"task.vocab={vocab_dir}",
        "task.labels='B-Disease,I-Disease,O'",
        "task.layer_lr_decay=0.8",
        "task.head_dropout=0.0",
        "checkpoint.restore_file=checkpoint_last.pt",
        f"checkpoint.save_dir={save_dir}",
        "optimizer.groups.default.lr_float=1e-3",
        "optimizer.groups.default.lr_scheduler.warmup_updates=0",
        *TINY,
        *CPU,
    )
    task = tasks.setup_task(cfg.task)
    torch.manual_seed(0)
    model, criterion = task.build_model(cfg.model), task.build_criterion(cfg.criterion)
    d = task.source_dictionary
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(d.nspecial, len(d) - 1, (4, 12), generator=g)
    tokens[1, 8:], tokens[3, 5:] = d.pad(), d.pad()
    target = torch.randint(0, 3, tokens.shape, generator=g).masked_fill(tokens.eq(d.pad()), IGNORE)
    sample = {
        "id": torch.arange(4),
        "net_input": {"src_tokens": tokens},
        "target": target,
        "ntokens": int(tokens.ne(d.pad()).sum()),
        "nsentences": 4,
        "gold": [None] * 4,
    }
    return cfg, task, model, criterion, sample


def distillation_setup(vocab_dir, teacher, precision):
    """TinyBioBERT's distillation recipe (embedding, hidden-state and attention terms through the
    criterion's learned 16 -> 32 projection, KL) from the 2 x 32 teacher into a 1 x 16 student."""
    from fairseq import tasks

    student = dict(
        encoder_layers=1, encoder_embed_dim=16, encoder_ffn_embed_dim=32, encoder_attention_heads=4
    )
    cfg = composed(
        "distill_tinybiobert",
        f"precision={precision}",
        f"task.data={vocab_dir}",
        f"criterion.teacher={teacher}",
        "optimization.lr=[1e-3]",
        "model.max_positions=16",
        "model.dropout=0.0",
        "model.attention_dropout=0.0",
        *[f"model.{k}={v}" for k, v in student.items()],
        WARMUP,
        *CPU,
    )
    task = tasks.setup_task(cfg.task)
    torch.manual_seed(0)
    model, criterion = task.build_model(cfg.model), task.build_criterion(cfg.criterion)
    assert (
        criterion.layer_projection is not None
    )  # the projection's parameters are trained with the student
    return cfg, task, model, criterion, text_batch(task)


def train(cfg, task, model, criterion, sample, round_to=None):
    """``STEPS`` updates of fairseq's ``Trainer`` on ``sample`` in ``cfg.common``'s precision: the
    trainer, {name: initial weights}, {name: the weights the optimizer holds afterwards (its fp32
    master copy where it has one)}, all fp32, and the gradient norm of each update (unscaled: what
    the trainer logs).

    ``round_to``: round the (fp32) model's, criterion's and teacher's weights to that dtype first,
    so that an fp32 run starts from exactly the weights a run in that precision starts from."""
    from fairseq.trainer import Trainer

    if round_to is not None:
        for module in (model, criterion, getattr(criterion, "teacher", None)):
            if module is not None:
                module.to(round_to).float()
    trainer = Trainer(cfg, task, model, criterion)  # casts model and criterion (trainer.py:100-106)
    named = [*trainer.model.named_parameters(), *trainer.criterion.named_parameters()]
    names, params = zip(*[(n, p) for n, p in named if p.requires_grad])
    initial = {n: p.detach().float().clone() for n, p in zip(names, params)}
    norms = []
    for _ in range(STEPS):
        with metrics.aggregate(new_root=True) as logged:
            trainer.train_step([copy.deepcopy(sample)])
        norms.append(float(logged["gnorm"].val))
    optimizer = trainer.optimizer
    held = optimizer.fp32_params if hasattr(optimizer, "fp32_params") else params
    final = dict(zip(names, (p.detach().float() for p in held), strict=True))
    if hasattr(
        optimizer, "fp32_params"
    ):  # the model holds the master weights, rounded (fp16_optimizer.py:167-170)
        assert all(torch.equal(p, p32.to(p.dtype)) for p, p32 in zip(params, optimizer.fp32_params))
    return trainer, initial, final, norms


def half_ulp(x, dtype):
    """Half a unit in the last place of ``x``'s elements in ``dtype``: the most one rounding to it
    changes them."""
    finfo = torch.finfo(dtype)
    return finfo.eps * torch.exp2(torch.floor(torch.log2(x.abs().clamp_min(finfo.tiny)))) / 2


# Tolerances of an update made in low precision against fp32's from the same weights, after STEPS
# updates: (difference of the updates / the fp32 update's norm, per tensor; ratio of the two update
# norms - 1; gradient norm of each update, relative). Measured worst cases in the three set-ups
# below: fp16 0.057, 0.008, 6e-4; bf16 0.21, 0.016, 0.004. The direction is the loose one: Adam's
# first updates are about lr * sign(gradient) per element, so an element whose gradient is within
# rounding of 0 moves by lr either way; the norms are tight, and a lost lr scale (the layer-wise
# decay's 0.8 per layer) moves them by 25 % or more.
TOLERANCES = {torch.float16: (0.15, 0.03, 5e-3), torch.bfloat16: (0.4, 0.05, 2e-2)}


def check_against_fp32(setup, precision):
    """``setup(precision)``'s run against ``setup("fp32")``'s from the same (rounded) weights; the
    trainer."""
    dtype = torch.float16 if "fp16" in precision else torch.bfloat16
    _, initial, reference, ref_norms = train(*setup("fp32"), round_to=dtype)
    trainer, start, final, norms = train(*setup(precision))
    assert start.keys() == initial.keys() and all(
        torch.equal(start[k], initial[k]) for k in initial
    )
    rtol, norm_rtol, grad_rtol = TOLERANCES[dtype]
    torch.testing.assert_close(torch.tensor(norms), torch.tensor(ref_norms), rtol=grad_rtol, atol=0)
    # Without an fp32 master copy (memory_efficient_*) the weights are stored in the low precision
    # and rounded at every update: half a unit in the last place per update is allowed on top.
    ulps = 0 if hasattr(trainer.optimizer, "fp32_params") else STEPS
    checked = 0
    for name, ref in reference.items():
        if name.endswith("k_proj.bias"):
            # softmax cancels the key bias (its gradient is 0 in exact arithmetic): Adam makes
            # lr-sized steps either way out of the rounding noise in its place.
            continue
        update, ref_update = final[name] - initial[name], ref - initial[name]
        rounding = float((ulps * half_ulp(ref, dtype)).norm())
        scale = float(ref_update.norm())
        assert scale > 0, name
        assert float((update - ref_update).norm()) <= rtol * scale + rounding, name
        assert abs(float(update.norm()) - scale) <= norm_rtol * scale + rounding, name
        checked += 1
    assert checked >= len(reference) - 2
    return trainer, initial, final


PRECISIONS = ["fp16", "bf16", "memory_efficient_fp16", "memory_efficient_bf16"]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_fine_tuning_with_layer_lr_decay_trains_in_mixed_precision(precision, vocab_dir, tmp_path):
    """bio_tagging's composite optimizer with layer-wise lr decay 0.8 (one Adam group per depth),
    wrapped as fairseq wraps it for ``precision`` (and accepted by the task's check of its groups at
    the first update): the same updates as fp32, each group at its own learning rate."""
    from fairseq.optim.composite import FairseqCompositeOptimizer

    def setup(
        p,
    ):  # a second composite optimizer in this process: fairseq_bio.patches gives each its own groups
        return tagging_setup(vocab_dir, tmp_path / p, p)

    trainer, initial, final = check_against_fp32(setup, precision)
    wrapper = trainer.optimizer
    inner = getattr(wrapper, "fp32_optimizer", None) or wrapper.wrapped_optimizer
    assert type(wrapper).__name__ == (
        "MemoryEfficientFP16Optimizer" if "memory" in precision else "FP16Optimizer"
    )
    assert isinstance(inner, FairseqCompositeOptimizer)
    lrs = sorted(
        {group["lr"] for group in inner.param_groups}
    )  # a group per depth (and per weight decay)
    assert len(lrs) == 4 and lrs == pytest.approx([lrs[-1] * 0.8**k for k in (3, 2, 1, 0)])
    if "memory" in precision:
        # It trains, but its state does not load back: the wrapper's loading reads the torch
        # optimizer's param_groups (fp16_optimizer.py:377-379), which composite's has not
        # (composite.py:212-243). Hence the README's advice, precision=fp16 for the composite
        # optimizer.
        with pytest.raises(AttributeError, match="param_groups"):
            wrapper.load_state_dict(wrapper.state_dict())
    if precision == "memory_efficient_bf16":
        # What keeping no fp32 copy costs in bf16: an update smaller than half a bf16 unit of the
        # weight is rounded away at every step. LayerNorm weights start at 1.0, where that is 0.002
        # downwards and 0.004 upwards, more than these updates (lr 1e-3 x 0.8^k): they never move,
        # while fp32 and bf16 with master weights move them.
        layer_norms = [
            n for n in final if n.endswith(("layer_norm.weight", "layernorm_embedding.weight"))
        ]
        assert len(layer_norms) == 5 and all(torch.equal(final[n], initial[n]) for n in layer_norms)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_bio_adamw_trains_in_mixed_precision(precision, vocab_dir):
    """bio_adamw (torch's fused AdamW) on fp32 master weights, MLM pretraining with the bio-lm
    recipe: fp32's updates."""
    trainer, _, _ = check_against_fp32(
        lambda p: pretraining_setup(vocab_dir, p, "optimizer._name=bio_adamw"), precision
    )
    assert type(trainer.optimizer.fp32_optimizer).__name__ == "BioAdamW"


@pytest.mark.parametrize("precision", ["memory_efficient_fp16", "memory_efficient_bf16"])
def test_bio_adamw_trains_in_memory_efficient_precision(precision, vocab_dir):
    """bio_adamw on the fp16/bf16 weights themselves (no fp32 master copy): fairseq's wrapper takes
    it (it declares ``supports_memory_efficient_fp16``), its moments are fp32, and MLM pretraining
    with the bio-lm recipe makes fp32's updates within the low precision's roundings."""
    from fairseq_bio.optim.bio_adamw import FP32StateAdamW

    trainer, _, _ = check_against_fp32(
        lambda p: pretraining_setup(vocab_dir, p, "optimizer._name=bio_adamw"), precision
    )
    wrapper = trainer.optimizer
    assert type(wrapper).__name__ == "MemoryEfficientFP16Optimizer"
    adamw = wrapper.optimizer
    assert type(adamw) is FP32StateAdamW
    dtype = torch.float16 if "fp16" in precision else torch.bfloat16
    for group in adamw.param_groups:
        for p in group["params"]:
            state = adamw.state[p]
            assert p.dtype == dtype and state["exp_avg_sq"].dtype == torch.float32


@pytest.mark.parametrize("precision", PRECISIONS)
def test_distillation_projection_trains_in_mixed_precision(precision, vocab_dir, teacher):
    """TinyBioBERT's distillation (fairseq's adam): the student's parameters and the criterion's
    learned projections (the hidden states' and, as the paper's eq. 7 has it, the embeddings' own)
    are the optimizer's, and their updates in ``precision`` are fp32's."""
    trainer, initial, final = check_against_fp32(
        lambda p: distillation_setup(vocab_dir, teacher, p), precision
    )
    projection = [n for n, _ in trainer.criterion.named_parameters()]
    assert projection == [
        "layer_projection.weight",
        "layer_projection.bias",
        "embed_projection.weight",
        "embed_projection.bias",
    ]
    assert all(n in final and not torch.equal(final[n], initial[n]) for n in projection)


# --- 3. fp16 gradient overflows: skipped updates, a halved scale, and the diagnosis at the minimum --------------------


def fp16_pretraining(vocab_dir):
    """The trainer's fp16 set-up of the bio-lm recipe (``precision=fp16``: loss scale from 128,
    minimum 1e-4): (trainer, its FP16Optimizer, sample); model and criterion cast to fp16 by the
    trainer."""
    from fairseq.trainer import Trainer

    cfg, task, model, criterion, sample = pretraining_setup(vocab_dir, "fp16")
    trainer = Trainer(cfg, task, model, criterion)
    optimizer = trainer.optimizer
    assert (
        type(optimizer).__name__ == "FP16Optimizer"
        and next(trainer.model.parameters()).dtype == torch.float16
    )
    assert (optimizer.scaler.loss_scale, optimizer.scaler.min_loss_scale) == (128, 1e-4)
    return trainer, optimizer, sample


def backward(trainer, sample, update, loss_factor=1.0):
    """The forward/backward half of ``Trainer.train_step``: the task masks the batch and the wrapper
    scales the loss (``optimizer.backward``); then the gradients are divided by the sample size
    (trainer.py:946)."""
    task, optimizer = trainer.task, trainer.optimizer
    optimizer.zero_grad()
    masked = task.mask_sample(copy.deepcopy(sample), task.cfg.mask_prob, stream=update)
    loss, sample_size, _ = trainer.criterion(trainer.model, masked)
    optimizer.backward(loss * loss_factor)
    optimizer.multiply_grads(1.0 / float(sample_size))
    return masked


def fp32_grad_norm(trainer, masked):
    """The gradient norm of the fp16 model's weights, computed in fp32 (what the unscaled fp16 norm
    estimates)."""
    model = copy.deepcopy(trainer.model).float()
    loss, sample_size, _ = trainer.criterion(
        model, masked
    )  # fairseq's masked_lm: no weights of its own
    grads = torch.autograd.grad(
        loss / float(sample_size), [p for p in model.parameters() if p.requires_grad]
    )
    return float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])))


def test_an_overflowing_gradient_skips_the_update_and_halves_the_scale(vocab_dir):
    """An inf in one fp16 gradient (fc1 of layer 0): ``clip_grad_norm`` raises fairseq's
    ``OverflowError`` (the trainer then skips the update: zero_grad, no step) and halves the scale;
    the next update runs at scale 64, its gradients unscaled by 64 (its norm is the fp32 norm) and
    applied."""
    trainer, optimizer, sample = fp16_pretraining(vocab_dir)
    clip = trainer.cfg.optimization.clip_norm
    fc1 = trainer.model.encoder.sentence_encoder.layers[0].fc1.weight
    backward(trainer, sample, update=0)
    assert torch.isfinite(fc1.grad).all()
    fc1.grad[0, 0] = float("inf")
    with pytest.raises(OverflowError, match="setting loss scale to: 64"):
        optimizer.clip_grad_norm(clip)
    assert optimizer.scaler.loss_scale == 64
    master = {id(p): p32 for p, p32 in zip(optimizer.fp16_params, optimizer.fp32_params)}
    assert torch.isinf(
        master[id(fc1)].grad
    ).any()  # the overflow reached the fp32 copy, which the norm saw
    optimizer.zero_grad()  # the trainer's OverflowError handler (trainer.py:1024); no step

    before = [p32.detach().clone() for p32 in optimizer.fp32_params]
    masked = backward(trainer, sample, update=0)
    norm = float(optimizer.clip_grad_norm(clip))
    assert norm == pytest.approx(fp32_grad_norm(trainer, masked), rel=5e-3)
    optimizer.step()
    assert optimizer.scaler.loss_scale == 64
    assert all(torch.isfinite(p).all() for p in optimizer.fp32_params)
    moved = [not torch.equal(a, b) for a, b in zip(before, optimizer.fp32_params)]
    assert (
        sum(moved) >= len(moved) - 2
    )  # every weight moved (the key biases' gradients may be exactly 0)
    assert torch.equal(fc1, master[id(fc1)].half())


def test_overflows_down_to_the_minimum_scale_end_in_a_one_line_error(vocab_dir):
    """After a clean update, a loss that overflows fp16 at any scale (x 1e30, finite in fp32): each
    update is skipped with the scale halved, until the 21st (128 / 2^21 < 1e-4) raises the plugin's
    ``LossScaleError``: a ``FloatingPointError`` (fairseq's trainer re-runs the step under its
    NanDetector and re-raises it) and a ``BioError`` (the run ends with its one line), saying how it
    got there; no weight moved meanwhile.
    """
    trainer, optimizer, sample = fp16_pretraining(vocab_dir)
    clip = trainer.cfg.optimization.clip_norm
    backward(trainer, sample, update=0)
    optimizer.clip_grad_norm(clip)
    optimizer.step()
    before = [p32.detach().clone() for p32 in optimizer.fp32_params]

    overflows = 0
    with pytest.raises(LossScaleError) as error:
        for update in range(1, 40):
            backward(trainer, sample, update, loss_factor=1e30)
            overflows += 1
            try:
                optimizer.clip_grad_norm(clip)
            except OverflowError:
                optimizer.zero_grad()
                continue
            optimizer.step()
    assert isinstance(error.value, FloatingPointError) and isinstance(error.value, BioError)
    assert overflows == 21
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(
        "fp16: minimum loss scale reached (0.0001) after 21 gradient overflows in a row (scale 128 -> 0.0001, "
        "from optimizer step 1)"
    )
    assert (
        optimizer.scaler.loss_scale == 128 / 2**20
    )  # fairseq keeps the last scale above the minimum
    assert all(torch.equal(a, b) for a, b in zip(before, optimizer.fp32_params))


# --- 4. fused attention (scaled_dot_product_attention) against the explicit path --------------------------------------


@pytest.mark.parametrize(
    "dtype, rtol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)], ids=["fp32", "bf16"]
)
def test_fused_and_explicit_attention_agree_on_padded_batches(dtype, rtol):
    """One encoder layer's attention on a batch whose rows have 9, 5 and 7 real tokens (key padding,
    no causal mask, dropout off): torch's fused ``scaled_dot_product_attention`` (the training path)
    and the explicit one (scores, fp32 softmax, the path that returns the maps) give the same
    outputs and the same gradients of the input and of every projection. fp32: 1e-5 of the largest
    value (measured 2e-7); bf16: 2e-2 (measured 5e-3; 8-bit mantissas, and the explicit path rounds
    the probabilities to bf16 before mixing the values, where the fused kernel accumulates in
    fp32)."""
    dictionary, _ = make_dictionary([f"w{i}" for i in range(20)])
    torch.manual_seed(0)
    model = BioRobertaModel.build_model(
        model_args(**SIZES, dropout=0.0, attention_dropout=0.0), DictionaryTask(dictionary)
    )
    fused = model.encoder.sentence_encoder.layers[0].to(dtype).eval()
    explicit = copy.deepcopy(fused)
    lengths = (9, 5, 7)
    padding = torch.arange(9)[None, :] >= torch.tensor(lengths)[:, None]  # B x T, True at pads
    x = torch.randn(9, 3, SIZES["encoder_embed_dim"], dtype=dtype)  # T x B x C
    x_fused, x_explicit = x.clone().requires_grad_(), x.clone().requires_grad_()

    out_fused = fused._attention(x_fused, padding)
    out_explicit, probs = explicit._attention_with_maps(x_explicit, padding, None)
    assert probs[1, :, :, 5:].abs().max() == 0  # the explicit path masked the padded keys
    close(out_fused.float(), out_explicit.float(), rtol)

    weights = torch.randn(out_fused.shape, dtype=dtype)
    (out_fused * weights).sum().backward()
    (out_explicit * weights).sum().backward()
    close(x_fused.grad.float(), x_explicit.grad.float(), rtol, name="input")
    assert (
        assert_same_gradients(fused.float(), explicit.float(), rtol) == 8
    )  # q, k, v, out: weights and biases
