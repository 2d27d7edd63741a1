"""Comparing tensors in tests: fp32 agreement with a tolerance, gradients by parameter name, nested
states bit for bit."""

import torch


def close(actual, expected, rtol=1e-5, scale=None, name=""):
    """fp32 agreement: ``rtol`` relative, with the absolute floor at ``rtol`` times ``scale``
    (default: the tensor's largest value)."""
    scale = float(expected.detach().abs().max()) if scale is None else scale
    torch.testing.assert_close(
        actual, expected, rtol=rtol, atol=rtol * scale + 1e-12, msg=lambda m: f"{name}: {m}"
    )


def assert_same_gradients(model, reference, rtol=1e-5):
    """Every parameter's gradient equals the reference model's (by name). The absolute floor is
    relative to the model's largest gradient: some are 0 in exact arithmetic (the key bias, which
    softmax cancels) and float noise.
    """
    ref = {name: p.grad for name, p in reference.named_parameters()}
    scale = max(float(g.abs().max()) for g in ref.values() if g is not None)
    checked = 0
    for name, param in model.named_parameters():
        if ref[name] is None:
            assert param.grad is None or param.grad.abs().max() == 0, name
            continue
        close(param.grad, ref[name], rtol, scale, name)
        checked += 1
    return checked


def assert_same_state(a, b):
    """Equal tensors (bit for bit) and equal everything else, through nested dicts and lists."""
    assert type(a) is type(b) or (torch.is_tensor(a) and torch.is_tensor(b))
    if torch.is_tensor(a):
        assert a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same_state(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same_state(x, y)
    else:
        assert a == b
