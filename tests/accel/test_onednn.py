"""oneDNN linear kernels: same values and gradients as F.linear, packed weights scoped."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from agentic_rl.accel.onednn import (
    OneDNNLinear,
    linear,
    linear_kernel,
    onednn_available,
    onednn_linear,
    onednn_linear_then,
    pack_weight,
    packed_weights,
    set_linear_kernel,
)
from agentic_rl.models import load

pytestmark = pytest.mark.skipif(not onednn_available(), reason="torch built without oneDNN")


def _layer(bias: bool) -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(24, 40, bias=bias)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(7, 24), (3, 5, 24)])
def test_forward_and_gradients_match_f_linear(bias, shape):
    reference, fast = _layer(bias), _layer(bias)
    set_linear_kernel(fast, "onednn")
    assert type(fast) is OneDNNLinear and type(reference) is torch.nn.Linear
    x = torch.randn(*shape)
    x_ref, x_fast = x.clone().requires_grad_(), x.clone().requires_grad_()
    upstream = torch.randn(*shape[:-1], 40)
    y_ref, y_fast = reference(x_ref), fast(x_fast)
    torch.testing.assert_close(y_fast, y_ref, rtol=1e-5, atol=1e-5)
    (y_ref * upstream).sum().backward()
    (y_fast * upstream).sum().backward()
    torch.testing.assert_close(x_fast.grad, x_ref.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fast.weight.grad, reference.weight.grad, rtol=1e-5, atol=1e-5)
    if bias:
        torch.testing.assert_close(fast.bias.grad, reference.bias.grad, rtol=1e-5, atol=1e-5)


def test_transposed_input_and_frozen_weight():
    layer = _layer(True)
    set_linear_kernel(layer, "onednn")
    layer.weight.requires_grad_(False)
    x = torch.randn(24, 6).t().requires_grad_()  # non-contiguous
    layer(x).sum().backward()
    assert layer.weight.grad is None
    torch.testing.assert_close(x.grad, layer.weight.sum(0).expand(6, -1), rtol=1e-5, atol=1e-5)


def test_other_inputs_fall_back_to_f_linear():
    layer = _layer(True)
    set_linear_kernel(layer, "onednn")
    assert layer(torch.randn(0, 24)).shape == (0, 40)
    layer.double()
    x64 = torch.randn(4, 24, dtype=torch.float64)
    assert torch.equal(layer(x64), F.linear(x64, layer.weight, layer.bias))
    assert torch.equal(linear(x64, layer.weight, layer.bias), F.linear(x64, layer.weight, layer.bias))


def test_packed_weights_are_scoped_and_follow_weight_changes():
    layer = _layer(False)
    set_linear_kernel(layer, "onednn")
    x = torch.randn(16, 24)
    with torch.no_grad(), packed_weights(layer):
        torch.testing.assert_close(layer(x), x @ layer.weight.t(), rtol=1e-5, atol=1e-5)
        assert layer._packed is not None
        layer.weight.mul_(2)  # an in-place update bumps the version: repacked
        torch.testing.assert_close(layer(x), x @ layer.weight.t(), rtol=1e-5, atol=1e-5)
    assert "_packed" not in layer.__dict__ and not layer._packing
    with torch.no_grad():
        layer.weight.data.copy_(torch.ones_like(layer.weight))  # no version bump: must not reuse a pack
        torch.testing.assert_close(layer(x), x @ layer.weight.t(), rtol=1e-5, atol=1e-5)


def test_set_linear_kernel_round_trip_keeps_parameters_and_state_dict():
    model, _ = load("tiny-random", device="cpu", linear_kernel="torch")
    assert linear_kernel(model) == "torch"
    keys = list(model.state_dict())
    weight = model.lm_head.weight
    assert set_linear_kernel(model, "auto") == "onednn"
    assert linear_kernel(model) == "onednn" and model.lm_head.weight is weight
    assert list(model.state_dict()) == keys
    assert set_linear_kernel(model, "torch") == "torch"
    assert not any(type(m) is OneDNNLinear for m in model.modules())
    with pytest.raises(ValueError, match="linear kernel 'fast' is not one of: auto, onednn, torch"):
        set_linear_kernel(model, "fast")


def test_model_outputs_match_between_kernels():
    model, _ = load("tiny-random", device="cpu", linear_kernel="torch")
    ids = torch.randint(3, 200, (2, 12))
    with torch.no_grad():
        reference = model(input_ids=ids).logits
        set_linear_kernel(model, "onednn")
        fast = model(input_ids=ids).logits
        with packed_weights(model):
            packed = model(input_ids=ids).logits
    torch.testing.assert_close(fast, reference, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(packed, reference, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("packed", [False, True])
def test_post_ops_match_the_separate_operations(packed):
    torch.manual_seed(0)
    x, weight, bias = torch.randn(5, 1, 12), torch.randn(7, 12), torch.randn(7)
    other = torch.randn(5, 1, 7)
    w = pack_weight(weight) if packed else weight
    plain = F.linear(x, weight, bias)
    torch.testing.assert_close(onednn_linear(x, w, bias), plain, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(onednn_linear(x, w, bias, activation="swish"), F.silu(plain), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(onednn_linear_then(x, w, bias, "add", other), plain + other, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(onednn_linear_then(x, w, bias, "mul", other), plain * other, rtol=1e-5, atol=1e-5)
