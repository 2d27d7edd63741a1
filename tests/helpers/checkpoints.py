"""Reading checkpoints back in tests: what torch's weights_only loader would refuse, parameters
compared across runs, and an edited copy of a checkpoint."""

import json
import subprocess
import sys

import torch

from fairseq_bio import checkpoints


def unsafe_globals(path):
    """The globals torch's weights_only loader rejects by default (asked in a process without the
    plugin)."""
    code = f"import json, torch; print(json.dumps(torch.serialization.get_unsafe_globals_in_checkpoint({str(path)!r})))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return set(json.loads(out))


def global_name(obj):
    return f"{getattr(obj, '__module__', 'typing')}.{getattr(obj, '__qualname__', getattr(obj, '_name', ''))}"


def parameters(checkpoint):
    return checkpoints.load_checkpoint(checkpoint)["model"]


def assert_same_parameters(a, b):
    a, b = parameters(a), parameters(b)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.allclose(a[name], b[name], atol=1e-5, rtol=0), (
            name,
            (a[name] - b[name]).abs().max(),
        )


def save_with(checkpoint, path, edit):
    """A copy of ``checkpoint`` changed by ``edit(state)``, saved at ``path``."""
    state = checkpoints.load_checkpoint(checkpoint)
    edit(state)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path)
    return path
