"""The chunked vocabulary head gives log_softmax's values, entropies and gradients."""

from __future__ import annotations

import pytest
import torch

from agentic_rl.accel import head as head_module
from agentic_rl.accel import head_logprobs
from agentic_rl.accel.onednn import set_linear_kernel


def _reference(head, hidden, targets, temperature):
    logits = head(hidden).float() / temperature
    log_probs = torch.log_softmax(logits, dim=-1)
    return log_probs.gather(-1, targets[:, None]).squeeze(-1), -(log_probs.exp() * log_probs).sum(-1)


@pytest.mark.parametrize("kernel", ["torch", "onednn"])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("keep", [False, True], ids=["recompute", "kept"])
def test_chunked_head_matches_log_softmax(monkeypatch, kernel, bias, temperature, keep):
    # Blocks of 32 rows (75 rows: three, the last partial), each over vocabulary chunks of
    # 16 entries (64 entries: four), so the online normaliser and the gradient accumulation
    # across row blocks are both exercised.
    monkeypatch.setattr(head_module, "HEAD_ROW_BLOCK", 32)
    monkeypatch.setattr(head_module, "HEAD_CHUNK_ELEMENTS", 16 * 32)
    # The backward either recomputes each chunk's logits or reuses the forward's.
    monkeypatch.setattr(head_module, "HEAD_SAVE_BYTES", 1 << 40 if keep else 0)
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 64, bias=bias)
    set_linear_kernel(head, kernel)
    hidden = (3 * torch.randn(75, 16)).requires_grad_()
    targets = torch.randint(0, 64, (75,))
    upstream = torch.randn(75)

    expected, expected_entropy = _reference(head, hidden, targets, temperature)
    (expected * upstream).sum().backward()
    grads = [hidden.grad.clone(), head.weight.grad.clone()] + ([head.bias.grad.clone()] if bias else [])
    hidden.grad = None
    head.zero_grad(set_to_none=True)

    picked, entropy = head_logprobs(head, hidden, targets, temperature=temperature, with_entropy=True)
    (picked * upstream).sum().backward()
    torch.testing.assert_close(picked, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropy, expected_entropy.detach(), rtol=1e-5, atol=1e-5)
    assert not entropy.requires_grad
    got = [hidden.grad, head.weight.grad] + ([head.bias.grad] if bias else [])
    for a, b in zip(got, grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_hand_computed_value():
    head = torch.nn.Linear(2, 3, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]))
    picked, entropy = head_logprobs(head, torch.tensor([[2.0, 0.0]]), torch.tensor([0]), with_entropy=True)
    # logits (2, 0, 0): log p0 = 2 - log(e^2 + 2)
    z = torch.log(torch.exp(torch.tensor(2.0)) + 2)
    assert picked.item() == pytest.approx(2 - z.item(), abs=1e-6)
    p = torch.softmax(torch.tensor([2.0, 0.0, 0.0]), 0)
    assert entropy.item() == pytest.approx(float(-(p * p.log()).sum()), abs=1e-6)


def test_hooked_head_takes_the_module_call():
    head = torch.nn.Linear(4, 8)
    seen = []
    head.register_forward_pre_hook(lambda module, args: seen.append(args[0].shape))
    picked, entropy = head_logprobs(head, torch.randn(5, 4), torch.randint(0, 8, (5,)))
    assert seen == [torch.Size([5, 4])] and picked.shape == (5,) and entropy is None


def test_kept_chunks_survive_a_retained_graph(monkeypatch):
    monkeypatch.setattr(head_module, "HEAD_CHUNK_ELEMENTS", 16 * 8)
    torch.manual_seed(1)
    head = torch.nn.Linear(8, 48, bias=False)
    hidden = torch.randn(10, 8, requires_grad=True)
    picked, _ = head_logprobs(head, hidden, torch.randint(0, 48, (10,)))
    picked.sum().backward(retain_graph=True)
    first = hidden.grad.clone()
    hidden.grad = None
    picked.sum().backward()
    torch.testing.assert_close(hidden.grad, first, rtol=0, atol=0)
