"""A lean forward pass of Llama-family decoders for rollouts on CPU.

A decode step of a small model is mostly fixed costs: transformers' modules issue
about 50 tensor operations per layer, each a separate dispatch, and 7 matrix products
that are too narrow to run near the matmul peak. During a rollout the weights cannot
change, so this forward packs them once for the session into the native kernels'
layout (accel/native.py: AVX-512, built on first use) or, where those are not
available, oneDNN's. It fuses the q/k/v projections into one wider product, folds the
RMSNorms before the products into them (native) and the residual adds, SiLU and the
gate-times-up product into their epilogues, and computes rotary embedding and attention
with the fewest operations. The packed q/k rows are reordered so each rotary pair is
adjacent (the rotation is then one in-place complex product; queries and keys share the
order, so their dot products are unchanged: the session's cache holds keys in this
order) and carry the attention scaling. Attention is grouped-query SDPA for prefill; for
a single new token, the native attention kernel over the slot cache in place (or two
batched products over its views). With the native kernels the vocabulary head is packed
too (:meth:`LeanDecoder.logits`).
It reads the model's own modules (embedding, rotary tables, norms, head), so a
supported model needs nothing converted.

Supported: ``model_type`` llama, qwen2 and mistral without a sliding window, SiLU MLPs,
on CPU: float32 weights with projections on the oneDNN kernel (accel/onednn.py; a model
kept on torch's kernels, or with adapters wrapping its projections, is not touched), or
bfloat16 weights (a bf16 rollout copy) with plain linear projections and head where the
native kernels run. With bf16 weights the products are bf16 with float32 sums, as under
bf16 autocast, and everything between them (the residual stream, norms, rotary
embedding, attention, the KV cache: :attr:`LeanDecoder.cache_dtype`) stays float32: about
twice as fast as float32 weights where a step streams them, and nearer the float32
master than transformers' bf16 forward, which rounds every activation to bf16.
:func:`decoder_for` (and :func:`lean_decoder`) return None for anything else and the
caller keeps the transformers forward. Numerics match that forward to float32 rounding
(tests/accel/test_lean.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from agentic_rl.accel import native as native_kernels
from agentic_rl.accel.onednn import OneDNNLinear, onednn_available, onednn_linear, onednn_linear_then, pack_weight
from agentic_rl.anatomy import split_model

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "mistral")


def _bias(*modules) -> torch.Tensor | None:
    """The modules' biases concatenated, in float32 (zeros for a module without one)."""
    if all(m.bias is None for m in modules):
        return None
    return torch.cat([m.bias.detach().float() if m.bias is not None else torch.zeros(m.out_features) for m in modules])


class _OneDNNProjection:
    """op(x W^T + b) on oneDNN's packed weights and post-ops: native_kernels.PackedLinear's
    call contract (no folded norm: the forward normalises once for gate and up)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        self.weight, self.bias = pack_weight(weight), bias

    def __call__(self, x: torch.Tensor, op: str = "none", other: torch.Tensor | None = None) -> torch.Tensor:
        if op == "none" or op == "swish":
            return onednn_linear(x, self.weight, self.bias, activation=op)
        return onednn_linear_then(x, self.weight, self.bias, op, other)


def _pair_rows(heads: int, head_dim: int) -> torch.Tensor:
    """Row order that puts each rotary pair (i, i + head_dim/2) of every head side by side,
    so the rotation is one in-place complex product. Queries and keys get the same order:
    their dot products, all attention reads, are unchanged."""
    half = head_dim // 2
    within = torch.stack([torch.arange(half), torch.arange(half) + half], dim=1).flatten()
    return (torch.arange(heads)[:, None] * head_dim + within).flatten()


class _Layer:
    """One decoder layer's products. With ``fold_norms`` the q/k/v, gate and up products
    RMS-normalise their input themselves (native kernels); otherwise the forward runs the norms."""

    def __init__(self, layer, heads: int, kv_heads: int, head_dim: int, projection, fold_norms: bool) -> None:
        attention, mlp = layer.self_attn, layer.mlp
        self.input_norm, self.post_norm = layer.input_layernorm, layer.post_attention_layernorm
        self.fold_norms = fold_norms

        def norm(module) -> dict:
            return {"norm_weight": module.weight.detach(), "norm_eps": module.variance_epsilon} if fold_norms else {}

        # Fused q/k/v rows, with two changes the attention cannot see: q and k rows in rotary
        # pair order, and the attention scaling folded into q (rotation is linear).
        projections = (attention.q_proj, attention.k_proj, attention.v_proj)
        order = torch.cat(
            [
                _pair_rows(heads + kv_heads, head_dim),
                torch.arange((heads + kv_heads) * head_dim, sum(m.out_features for m in projections)),
            ]
        )
        weight = torch.cat([m.weight.detach() for m in projections])[order]
        bias = _bias(*projections)
        scale = torch.ones(weight.shape[0])
        scale[: heads * head_dim] = attention.scaling
        scaled = weight.float() * scale[:, None]
        # bf16 weights keep their exact values: the scaling is folded in only where that
        # rounds nothing (a power of two), else the forward scales the queries.
        self.query_scale = None
        if weight.dtype != torch.float32 and not torch.equal(scaled.to(weight.dtype).float(), scaled):
            self.query_scale, scaled, scale = attention.scaling, weight, torch.ones_like(scale)
        self.qkv_bias = None if bias is None else bias[order] * scale
        self.qkv = projection(scaled.to(weight.dtype), self.qkv_bias, **norm(self.input_norm))
        self.o = projection(attention.o_proj.weight, _bias(attention.o_proj))
        # Gate and up stay separate products: each then carries its post-op (SiLU; times the gate).
        post_norm = norm(self.post_norm)
        self.gate = projection(mlp.gate_proj.weight, _bias(mlp.gate_proj), **post_norm)
        self.up = projection(mlp.up_proj.weight, _bias(mlp.up_proj), **post_norm)
        self.down = projection(mlp.down_proj.weight, _bias(mlp.down_proj))


def _rms_norm(x: torch.Tensor, norm) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), norm.weight.to(x.dtype), norm.variance_epsilon)


class LeanDecoder:
    """``forward(input_ids, positions, mask, cache) -> last hidden states`` with the same
    contract as the transformers backbone call of a decode session (its SlotCache bound
    beforehand)."""

    def __init__(self, backbone, lm_head=None, *, native: bool | None = None) -> None:
        config = backbone.config
        self.backbone = backbone
        self.cache_dtype = torch.float32
        """The dtype of the KV cache this forward reads and writes (float32, whatever the weights)."""
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        # The products: the native kernels where it is available (faster on decode's few
        # rows, as fast at prefill sizes), else oneDNN's packed weights.
        self.native = native_kernels.available() if native is None else native
        projection = native_kernels.PackedLinear if self.native else _OneDNNProjection
        self.layers = [
            _Layer(layer, self.heads, self.kv_heads, self.head_dim, projection, self.native)
            for layer in backbone.layers
        ]
        # The head (a plain linear layer) joins the kernel; otherwise the caller runs the module.
        self.head = None
        if self.native and type(lm_head) in (OneDNNLinear, torch.nn.Linear):
            self.head = projection(lm_head.weight, _bias(lm_head))

    @torch.no_grad()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor | None:
        """The head's logits for ``hidden``, or None when the head is not covered (run the module)."""
        if self.head is None:
            return None
        return self.head(hidden)

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache) -> torch.Tensor:
        backbone = self.backbone
        batch, q = input_ids.shape
        hidden = backbone.embed_tokens(input_ids).float()
        cos, sin = backbone.rotary_emb(hidden, positions)
        half = self.head_dim // 2
        # The tables repeat their first half (checked in lean_decoder): one complex factor per pair.
        rotation = torch.complex(cos[..., :half], sin[..., :half])[:, :, None]  # [B, q, 1, head_dim / 2]
        q_width, kv_width = self.heads * self.head_dim, self.kv_heads * self.head_dim
        groups = self.heads // self.kv_heads
        # One new token per row: the native attention kernel, else two batched products per layer over
        # [B * kv, groups, ...] blocks (query heads sharing a key/value head), the mask an additive bias.
        decode_bias = lengths = None
        if q == 1 and self.native and self.head_dim % 16 == 0:
            # The session's mask is the causal prefix: row b sees its first position + 1 entries.
            lengths = positions[:, 0] + 1
        elif q == 1:
            decode_bias = torch.zeros(
                (batch, self.kv_heads, groups, mask.shape[-1]), dtype=hidden.dtype, device=hidden.device
            )
            decode_bias.masked_fill_(~mask, float("-inf"))
            decode_bias = decode_bias.view(batch * self.kv_heads, groups, -1)
        for index, layer in enumerate(self.layers):
            qkv = layer.qkv(hidden if layer.fold_norms else _rms_norm(hidden, layer.input_norm))
            if layer.query_scale is not None:
                qkv[..., :q_width].mul_(layer.query_scale)
            # Queries and keys rotate in place, in one complex product (each pair is two adjacent rows).
            torch.view_as_complex(
                qkv[..., : q_width + kv_width].view(batch, q, self.heads + self.kv_heads, half, 2)
            ).mul_(rotation)
            key = qkv[..., q_width : q_width + kv_width].view(batch, q, self.kv_heads, self.head_dim).transpose(1, 2)
            value = qkv[..., q_width + kv_width :].view(batch, q, self.kv_heads, self.head_dim).transpose(1, 2)
            keys, values = cache.update(key, value, index)
            if lengths is not None:
                attended = native_kernels.decode_attention(qkv[:, 0, :q_width], keys, values, lengths).view(
                    batch, q, q_width
                )
            elif decode_bias is not None:
                grouped = qkv[..., :q_width].reshape(batch * self.kv_heads, groups, self.head_dim)
                scores = torch.baddbmm(decode_bias, grouped, keys.flatten(0, 1).transpose(1, 2))
                attended = torch.bmm(torch.softmax(scores, dim=-1), values.flatten(0, 1)).view(batch, q, q_width)
            else:
                query = qkv[..., :q_width].view(batch, q, self.heads, self.head_dim).transpose(1, 2)
                attended = F.scaled_dot_product_attention(
                    query, keys, values, attn_mask=mask, scale=1.0, enable_gqa=groups > 1
                )
                attended = attended.transpose(1, 2).reshape(batch, q, q_width)
            hidden = layer.o(attended, "add", hidden)
            normed = hidden if layer.fold_norms else _rms_norm(hidden, layer.post_norm)
            hidden = layer.down(layer.up(normed, "mul", layer.gate(normed, "swish")), "add", hidden)
        return _rms_norm(hidden, backbone.norm)


def _plain_projections(layer, kinds: tuple[type, ...]) -> bool:
    """Only plain linear layers of ``kinds``: an adapter (e.g. peft LoRA) wrapping one would be skipped."""
    attention, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
    names = (("q_proj", "k_proj", "v_proj", "o_proj"), ("gate_proj", "up_proj", "down_proj"))
    return all(
        type(getattr(owner, name, None)) in kinds for owner, group in zip((attention, mlp), names) for name in group
    )


def _rotary_halves_repeat(backbone, dtype: torch.dtype) -> bool:
    """Whether the model's rotary tables are cat(freqs, freqs) (Llama's rotate-half form,
    which the pair order relies on), probed at a few positions (small ones: a dynamic rope
    rescales itself past its trained length)."""
    cos, sin = backbone.rotary_emb(torch.zeros(1, dtype=dtype), torch.tensor([[0, 1, 7, 63]]))
    half = cos.shape[-1] // 2
    return (
        cos.shape[-1] % 2 == 0
        and torch.equal(cos[..., :half], cos[..., half:])
        and torch.equal(sin[..., :half], sin[..., half:])
    )


def lean_decoder(backbone, lm_head=None, *, native: bool | None = None) -> LeanDecoder | None:
    """A LeanDecoder over ``backbone`` (and ``lm_head``, when the kernel covers it; weights
    packed now: build it only where they stay fixed), or None when the model or the
    machine is not covered. ``native``: force the native kernels on or off (default: on
    where available)."""
    config = backbone.config
    parameter = next(backbone.parameters(), None)
    if parameter is None or parameter.device.type != "cpu":
        return None
    if parameter.dtype == torch.bfloat16:
        # bf16 weights decode on the native kernels only (oneDNN would round the activations too).
        covered = (native is not False and native_kernels.available()) and type(lm_head) in (
            OneDNNLinear,
            torch.nn.Linear,
        )
        kinds: tuple[type, ...] = (OneDNNLinear, torch.nn.Linear)
        native = True if covered else native
    else:
        covered, kinds = parameter.dtype == torch.float32 and onednn_available(), (OneDNNLinear,)
    if (
        not covered
        or config.model_type not in SUPPORTED_MODEL_TYPES
        or getattr(config, "hidden_act", "silu") != "silu"
        or (getattr(config, "sliding_window", None) is not None and getattr(config, "use_sliding_window", True))
        or not all(hasattr(backbone, name) for name in ("embed_tokens", "rotary_emb", "layers", "norm"))
        or not all(_plain_projections(layer, kinds) for layer in backbone.layers)
        or not _rotary_halves_repeat(backbone, torch.float32)
    ):
        return None
    return LeanDecoder(backbone, lm_head, native=native)


def decoder_for(model, *, native: bool | None = None) -> LeanDecoder | None:
    """The lean forward of a causal LM ``model`` (backbone and head, also through a peft
    wrapper), or None where it is not covered: :func:`lean_decoder` of its parts."""
    backbone, lm_head = split_model(model)
    return lean_decoder(backbone, lm_head, native=native)
