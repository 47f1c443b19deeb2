"""Training speed options change nothing numerically: log-probs, losses and gradients with
activation checkpointing (and torch.compile, slow) equal the plain pass."""

from __future__ import annotations

import pytest
import torch

from agentic_rl.models import load
from agentic_rl.training.batch import collate
from agentic_rl.training.logprobs import token_logprobs
from agentic_rl.training.speed import apply_speed_options


def _batch():
    prefix = list(range(100, 150))  # a shared prefix long enough for the shared-prefix path
    ids = [prefix + [5, 6, 7, 8, 9, 10], prefix + [11, 12, 13], prefix + [14, 15, 16, 17, 18, 19, 20, 21]]
    masks = [[0] * 50 + [0, 1, 1, 0, 1, 1], [0] * 50 + [1, 1, 1], [0] * 50 + [0, 0, 1, 1, 1, 1, 0, 1]]
    return collate(ids, masks, pad_token_id=2)


def _loss_and_grads(model, batch):
    model.train()
    model.zero_grad(set_to_none=True)
    logprobs, entropy = token_logprobs(
        model, batch.input_ids, batch.attention_mask, batch.loss_mask, temperature=0.7, with_entropy=True
    )
    weights = torch.linspace(-1.0, 1.0, logprobs.numel()).reshape(logprobs.shape)
    loss = -(logprobs * weights * batch.loss_mask).sum() / batch.loss_mask.sum()
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return logprobs.detach(), entropy, float(loss), grads


def _compare(plain, fast) -> None:
    (lp_a, ent_a, loss_a, grads_a), (lp_b, ent_b, loss_b, grads_b) = plain, fast
    assert (lp_a != 0).sum() == 12
    assert torch.allclose(lp_a, lp_b, atol=1e-5)
    assert torch.allclose(ent_a, ent_b, atol=1e-4)
    assert loss_a == pytest.approx(loss_b, abs=1e-5)
    assert grads_a.keys() == grads_b.keys() and len(grads_a) > 0
    for name in grads_a:
        assert torch.allclose(grads_a[name], grads_b[name], atol=1e-5), name


def test_activation_checkpointing_gives_the_same_logprobs_loss_and_gradients() -> None:
    batch = _batch()
    plain = _loss_and_grads(load("tiny-random", device="cpu")[0], batch)
    model = apply_speed_options(load("tiny-random", device="cpu")[0], gradient_checkpointing=True)
    assert model.model.gradient_checkpointing
    _compare(plain, _loss_and_grads(model, batch))


@pytest.mark.slow
def test_compiled_layers_give_the_same_logprobs_loss_and_gradients() -> None:
    batch = _batch()
    plain = _loss_and_grads(load("tiny-random", device="cpu")[0], batch)
    model = apply_speed_options(load("tiny-random", device="cpu")[0], compile=True)
    _compare(plain, _loss_and_grads(model, batch))


def test_activation_checkpointing_on_transformers_before_5_24() -> None:
    """Before 5.24 transformers has only ``gradient_checkpointing_enable`` (the GPU image
    of 2026-11-28 ran 5.17): the option takes that name there, non-reentrant either way."""

    class Old(torch.nn.Module):
        config = type("Config", (), {"use_cache": True})()
        calls: list = []

        def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
            self.calls.append(gradient_checkpointing_kwargs)

    model = apply_speed_options(Old(), gradient_checkpointing=True)
    assert model.calls == [{"use_reentrant": False}] and model.config.use_cache is False
