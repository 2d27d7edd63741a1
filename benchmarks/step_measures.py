"""How a training step is measured, for the benchmarks that time and size one (``encoder_speed``,
``largest_batch``, ``distillation``): its peak memory (CUDA's across fairseq's per-step resets, the
CPU's resident set), its FLOPs and the machine's peak for MFU, and a profile's time by group.
"""

import contextlib
import time

SEQ = 512  # the tokens of every block the steps measured here train on
PEAK_TFLOPS = {"H100": 989.4, "H200": 989.4, "A100": 312.0}  # dense bf16 tensor-core peaks (SXM)
PEAK_TFLOPS_FP32 = {
    "H100": 494.7,
    "H200": 494.7,
    "A100": 156.0,
}  # TF32 tensor-core peaks (what fp32 matmuls use)


def training_flops(
    layers: int, dim: int, ffn: int, vocab: int, tokens: int, predicted: int, **_
) -> float:
    """Training FLOPs of one step: ``6 N tokens + 12 L s d tokens + 6 (d^2 + d V) predicted``.

    N = L (4 d^2 + 2 d f) counts the encoder layers' matmul weights (QKV, output projection, FFN;
    biases, norms and embeddings left out), s = 512, d the width, f the FFN width, V the output
    vocabulary. The attention term is QK^T and attention x V, forward and backward. The LM head
    runs only on the ``predicted`` (masked) positions; HF runs its head on every position, work
    this count does not credit. MFU divides by the device's dense bf16 (or TF32) tensor-core peak
    on CUDA, by ``cpu_peak_gflops`` on a CPU."""
    n = layers * (4 * dim * dim + 2 * dim * ffn)
    return (
        6 * n * tokens
        + 12 * layers * SEQ * dim * tokens
        + 6 * (dim * dim + dim * vocab) * predicted
    )


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def resident_bytes() -> int:
    """The process's resident memory now (VmRSS), in bytes."""
    return _status_kib("VmRSS") * 1024


@contextlib.contextmanager
def true_peak(cuda=None, read=None):
    """Yield a function that gives the largest value ``read()`` (default
    ``torch.cuda.max_memory_allocated``) has reached since entry, even across calls of
    ``cuda.reset_peak_memory_stats`` (``cuda`` default ``torch.cuda``), which fairseq's Trainer
    makes every step: inside, that function is replaced by one that first records ``read()``.
    Callers reach it as ``torch.cuda.reset_peak_memory_stats`` at call time, so they all get the
    wrapper.
    """
    if cuda is None:
        import torch

        cuda = torch.cuda
    read = read or cuda.max_memory_allocated
    reset, peak = cuda.reset_peak_memory_stats, 0

    def recording_reset(*a, **kw):
        nonlocal peak
        peak = max(peak, read())
        return reset(*a, **kw)

    reset()
    cuda.reset_peak_memory_stats = recording_reset
    try:
        yield lambda: max(peak, read())
    finally:
        cuda.reset_peak_memory_stats = reset


@contextlib.contextmanager
def rss_peak():
    """The CPU's counterpart of ``true_peak``: yield a function giving the process's peak resident
    memory in bytes (VmHWM), the kernel's counter restarted from the current resident memory on
    entry."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    yield lambda: _status_kib("VmHWM") * 1024


# Profile groups, tried in this order on an op's (or kernel's) name, lower-cased; ALWAYS: a match
# anywhere in the chain of callers claims the time before any name is tried (the optimizer's Python
# loop, SDPA's inner ops).
ALWAYS = (
    (
        "optimizer + gradient norm",
        (
            "optimizer.",
            "adam",
            "clip_grad",
            "lpnorm",
            "foreach",
            "multi_tensor",
            "linalg_vector_norm",
            "aten::norm",
        ),
    ),
    ("attention", ("scaled_dot_product", "attention", "flash", "fmha", "sdpa")),
)
GROUPS = (
    ("loss (log-softmax, NLL)", ("log_softmax", "logsoftmax", "nll_loss", "cross_entropy")),
    ("attention", ("softmax",)),
    (
        "matmul",
        (
            "gemm",
            "aten::mm",
            "aten::addmm",
            "aten::bmm",
            "aten::baddbmm",
            "aten::matmul",
            "aten::linear",
            "mmbackward",
            "cublas",
            "cutlass",
            "nvjet",
            "xmma",
            "mkl",
        ),
    ),
    (
        "copy / gather",
        (
            "copy",
            "memcpy",
            "memset",
            "aten::cat",
            "clone",
            "contiguous",
            "index",
            "gather",
            "scatter",
            "embedding",
            "aten::stack",
            "constant_pad",
        ),
    ),
    (
        "elementwise / norm",
        (
            "norm",
            "gelu",
            "dropout",
            "bernoulli",
            "add",
            "mul",
            "div",
            "sub",
            "elementwise",
            "triton",
            "fill",
            "zero",
            "where",
            "sum",
            "sqrt",
            "reduce",
            "tanh",
            "aten::exp",
            "pow",
            "neg",
            "masked",
            "fused",
            "threshold",
            "cumsum",
            "aten::ne",
            "aten::eq",
            "rand",
        ),
    ),
)
OTHER = "other (views, allocation, ...)"
GROUP_NAMES = tuple(dict.fromkeys([g for g, _ in ALWAYS] + [g for g, _ in GROUPS] + [OTHER]))


def profile_group(chain) -> str:
    """The group of time spent in ``chain[0]``, called from ``chain[1]``, ``chain[2]``, ... (op or
    kernel names)."""
    names = [n.lower() for n in chain]
    for group, patterns in ALWAYS:
        if any(p in n for n in names for p in patterns):
            return group
    for name in names:
        for group, patterns in GROUPS:
            if any(p in name for p in patterns):
                return group
    return OTHER


def grouped_times(events, cuda: bool) -> dict:
    """{group: microseconds} over ``torch.profiler``'s events: CUDA kernels' time, or CPU ops' self
    time."""
    totals = dict.fromkeys(GROUP_NAMES, 0.0)
    for event in events:
        if event.is_async or event.device_type.name != "CPU":
            continue
        chain, parent = [event.name], event.cpu_parent
        while parent is not None:
            chain.append(parent.name)
            parent = parent.cpu_parent
        if cuda:
            for kernel in event.kernels:
                totals[profile_group([kernel.name] + chain)] += kernel.duration
        else:
            totals[profile_group(chain)] += event.self_cpu_time_total
    return totals


def cpu_peak_gflops(threads: int) -> float:
    """fp32 GFLOP/s of a 4096 x 4096 matmul on this machine with ``threads`` threads (best of 5).

    CPU MFU is measured against this, so it reads "of what this core's BLAS reaches"."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(4096, 4096), torch.randn(4096, 4096)
    a @ b
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * 4096**3 / best / 1e9


def device_peak_tflops(name: str, bf16: bool):
    for key in PEAK_TFLOPS:
        if key in name:
            return (PEAK_TFLOPS if bf16 else PEAK_TFLOPS_FP32)[key]
    return None
