"""Encoding a shared prompt prefix once gives the same log-probs and gradients as a full pass."""

from __future__ import annotations

import pytest
import torch

from agentic_rl import anatomy
from agentic_rl.anatomy import _shared_prefix_length
from agentic_rl.training.batch import collate
from agentic_rl.training.logprobs import token_logprobs


def _batch():
    prefix = list(range(100, 160))
    ids = [prefix + [5, 6, 7, 8, 9, 10], prefix + [11, 12, 13], prefix + [14, 15, 16, 17, 18, 19, 20, 21]]
    masks = [[0] * 60 + [0, 1, 1, 0, 1, 1], [0] * 60 + [1, 1, 1], [0] * 60 + [0, 0, 1, 1, 1, 1, 0, 1]]
    return collate(ids, masks, pad_token_id=2)


def test_prefix_stops_before_the_first_needed_hidden_state() -> None:
    batch = _batch()
    target = batch.loss_mask.bool()
    # Row 1 selects column 60, whose prediction needs the hidden state at column 59.
    assert _shared_prefix_length(batch.input_ids, batch.attention_mask, target) == 59


@pytest.mark.parametrize("with_grad", [False, True])
def test_shared_prefix_matches_full_forward(tiny, monkeypatch, with_grad) -> None:
    model, _ = tiny
    batch = _batch()
    weights = torch.randn(batch.input_ids.shape, generator=torch.Generator().manual_seed(1))
    results = []
    for threshold in (32, 10**9):  # shared prefix on, then off
        monkeypatch.setattr(anatomy, "MIN_SHARED_PREFIX", threshold)
        model.zero_grad(set_to_none=True)
        values, entropy = token_logprobs(
            model, batch.input_ids, batch.attention_mask, batch.loss_mask, with_entropy=True
        )
        grads = []
        if with_grad:
            (values * weights).sum().backward()
            grads = [p.grad.clone() for p in model.parameters()]
        results.append((values.detach(), entropy, grads))
    (shared, shared_entropy, shared_grads), (full, full_entropy, full_grads) = results
    assert torch.allclose(shared, full, atol=1e-5)
    assert torch.allclose(shared_entropy, full_entropy, atol=1e-4)
    assert (shared != 0).sum() == int(batch.loss_mask.sum())
    for a, b in zip(shared_grads, full_grads):
        assert torch.allclose(a, b, atol=1e-5)
    model.zero_grad(set_to_none=True)


def test_cache_goes_by_the_name_the_backbone_takes(tiny) -> None:
    """transformers 5.x renamed ``past_key_values`` to ``cache`` and warns on the old name
    (removed in 5.40): the shared-prefix pass uses whichever name the forward declares."""
    import inspect
    import warnings

    model, _ = tiny
    backbone, _ = anatomy.split_model(model)
    declared = inspect.signature(type(backbone).forward).parameters
    (name,) = anatomy.cache_argument(backbone, None)
    assert name in declared and name in ("cache", "past_key_values")
    batch = _batch()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a deprecated keyword would fail here
        hidden, prefix = anatomy.hidden_states(backbone, batch.input_ids, batch.attention_mask, batch.loss_mask.bool())
    assert prefix == 59 and hidden.shape[:2] == (3, batch.input_ids.shape[1] - 59)
