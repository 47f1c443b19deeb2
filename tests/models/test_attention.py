"""The attention routes (models/attention.py): float32 attention in CPU bf16 training
forwards, the key/value heads repeated for float32 on CUDA; same values and gradients as
transformers' sdpa where they apply, transformers' path everywhere else."""

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


def test_float32_only_for_short_cpu_training_forwards_in_low_precision():
    q = torch.zeros(2, 4, 8, 16, dtype=torch.bfloat16, requires_grad=True)
    assert attention.float32_here(q)
    assert not attention.float32_here(q.detach())  # no backward: bf16's forward is faster
    assert not attention.float32_here(q[:, :, :1])  # one query token (decoding)
    long = torch.zeros(1, 4, attention.FLOAT32_ATTENTION_MAX_TOKENS + 1, 16, dtype=torch.bfloat16, requires_grad=True)
    assert not attention.float32_here(long)
    fp32 = torch.zeros(2, 4, 8, 16, requires_grad=True)
    assert not attention.float32_here(fp32)  # a float32 forward
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert attention.float32_here(fp32)  # autocast would run sdpa in bf16


def test_loading_on_cpu_routes_sdpa_and_saves_plain_sdpa(tmp_path):
    model, _ = load("tiny-random", device="cpu")
    assert model.config._attn_implementation == attention.NAME
    model.save_pretrained(tmp_path)
    assert "agentic-rl" not in (tmp_path / "config.json").read_text()  # the saved model loads anywhere


@pytest.mark.parametrize("masked", [False, True])
def test_bf16_autocast_training_attention_runs_float32(monkeypatch, masked):
    torch.manual_seed(0)
    model, _ = load("tiny-random", device="cpu")
    ids = torch.randint(0, 1000, (2, 24))
    mask = torch.ones_like(ids)
    if masked:
        mask[0, :5] = 0
    from transformers.integrations import sdpa_attention

    seen = []
    real = sdpa_attention.sdpa_attention_forward
    monkeypatch.setattr(
        sdpa_attention,
        "sdpa_attention_forward",
        lambda m, q, k, v, *a, **kw: (
            seen.append((q.dtype, k.dtype, torch.is_autocast_enabled("cpu"))) or real(m, q, k, v, *a, **kw)
        ),
    )

    def run(grad: bool):
        model.zero_grad(set_to_none=True)
        with torch.set_grad_enabled(grad), torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(input_ids=ids, attention_mask=mask).logits
        if grad:
            logits.float().logsumexp(-1).sum().backward()
        return logits.detach().float()

    routed = run(grad=True)
    assert seen and set(seen) == {(torch.float32, torch.float32, False)}
    grad = model.model.layers[0].self_attn.q_proj.weight.grad.clone()
    seen.clear()
    scored = run(grad=False)  # no backward: transformers' bf16 path under autocast
    assert seen and all(autocast for *_, autocast in seen)
    # float32 attention agrees with the bf16 path to bf16 rounding, and trains: finite gradients
    torch.testing.assert_close(routed, scored, rtol=0.05, atol=0.05)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0


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
    model.set_attn_implementation("sdpa")
    attention.route_attention(model)
    assert model.config._attn_implementation == attention.NAME
    logits, grad = run()
    assert heads and set(heads) == {model.config.num_attention_heads}  # repeated before transformers' call
    torch.testing.assert_close(logits, expected_logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-5, atol=1e-6)
