"""The float32 CUDA attention route (models/attention.py): same values and gradients as
transformers' sdpa, the key/value heads repeated only where it applies."""

import pytest
import torch

from agentic_rl.models import attention, load


def test_ungroup_only_float32_multi_token_on_cuda():
    q = torch.zeros(1, 4, 8, 16)
    assert not attention.ungroup_here(q)  # CPU: its flash kernel takes GQA in float32
    if torch.cuda.is_available():
        assert attention.ungroup_here(q.cuda())
        assert not attention.ungroup_here(q.cuda().bfloat16())
        assert not attention.ungroup_here(q[:, :, :1].cuda())  # decoding keeps transformers' path


def test_loading_on_cpu_keeps_sdpa():
    model, _ = load("tiny-random", device="cpu")
    assert model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("masked", [False, True])
def test_ungrouped_route_matches_sdpa(monkeypatch, masked):
    torch.manual_seed(0)
    model, _ = load("tiny-random", device="cpu")
    assert model.config.num_attention_heads > model.config.num_key_value_heads  # grouped
    ids = torch.randint(0, 1000, (2, 24))
    mask = torch.ones_like(ids)
    if masked:
        mask[0, :5] = 0  # left padding: transformers passes a mask, not is_causal

    def run():
        model.zero_grad(set_to_none=True)
        logits = model(input_ids=ids, attention_mask=mask).logits
        logits.float().logsumexp(-1).sum().backward()
        return logits.detach(), model.model.layers[0].self_attn.q_proj.weight.grad.clone()

    expected_logits, expected_grad = run()
    from transformers.integrations import sdpa_attention

    heads = []
    real = sdpa_attention.sdpa_attention_forward
    monkeypatch.setattr(
        sdpa_attention,
        "sdpa_attention_forward",
        lambda m, q, k, v, *a, **kw: heads.append(k.shape[1]) or real(m, q, k, v, *a, **kw),
    )
    monkeypatch.setattr(attention, "ungroup_here", lambda query: query.shape[2] > 1)
    attention.use_ungrouped_fp32_attention(model)
    assert model.config._attn_implementation == attention.NAME
    logits, grad = run()
    assert heads and set(heads) == {model.config.num_attention_heads}  # repeated before transformers' call
    torch.testing.assert_close(logits, expected_logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-5, atol=1e-6)
