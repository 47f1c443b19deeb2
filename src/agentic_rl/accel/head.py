"""The vocabulary head's log-probabilities in vocabulary chunks (training's largest product).

For a small model the [tokens, vocab] logits are the largest tensors of a training step
(T x 49k for SmolLM2); :func:`head_logprobs` never holds them whole.
"""

from __future__ import annotations

import torch

from agentic_rl.accel.onednn import OneDNNLinear, linear

HEAD_CHUNK_ELEMENTS = 1 << 22
"""Logits held at once by the chunked vocabulary head (vocab columns x rows; 16 MB in float32)."""

HEAD_SAVE_BYTES = 256 << 20
"""The forward keeps each chunk's exponentiated logits for the backward when all of them
fit in this many bytes, which spares the backward one of the head's four products (the
recomputation of the logits); larger batches recompute."""

HEAD_ROW_BLOCK = 8192
"""Rows the chunked head takes at once: more rows would narrow its vocabulary chunks
below the width at which the products run efficiently."""


def head_logprobs(
    lm_head, hidden: torch.Tensor, targets: torch.Tensor, *, temperature: float = 1.0, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(targets[i] | hidden[i]) under softmax(lm_head(hidden) / temperature), and the
    predictive entropy (no gradient) if asked. Shapes: hidden [N, H], targets [N] -> [N].

    A linear head runs in vocabulary chunks and never holds the [N, vocab] logits (for a
    49k vocabulary they are the largest tensors of a step, and allocating them costs more
    than the matmul); the log-normaliser accumulates online over the chunks and the
    backward reuses each chunk's exponentiated logits (up to ``HEAD_SAVE_BYTES``) or
    recomputes them. Chunking the vocabulary (not the rows) reads
    each weight row once per pass and writes each row of the weight gradient once. Other
    heads (e.g. peft wrappers) and heads with hooks (the shared critic captures the head's
    input) take the plain module call; both paths give the same values and gradients.

    The products run in the autocast dtype when autocast is on (bf16-mixed), else in the
    weight's dtype; each logit chunk is upcast to float32 before the log-softmax, so the
    log-probs, entropies and the gradient's softmax are float32 whatever the weights."""
    hooked = bool(lm_head._forward_pre_hooks or lm_head._forward_hooks)
    if type(lm_head) in (torch.nn.Linear, OneDNNLinear) and not hooked:
        device = hidden.device.type
        compute_dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else lm_head.weight.dtype
        return _ChunkedHead.apply(
            hidden,
            lm_head.weight,
            lm_head.bias,
            targets,
            float(temperature),
            type(lm_head) is OneDNNLinear,
            with_entropy,
            compute_dtype,
        )
    logits = lm_head(hidden).float()
    if temperature != 1.0:
        logits = logits / temperature
    log_probs = torch.log_softmax(logits, dim=-1)
    picked = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    values = -(log_probs.exp() * log_probs).sum(-1).detach() if with_entropy else None
    return picked, values


def _vocab_chunks(rows: int, vocab: int) -> list[tuple[int, int]]:
    width = max(16, HEAD_CHUNK_ELEMENTS // max(rows, 1) // 16 * 16)
    return [(start, min(start + width, vocab)) for start in range(0, vocab, width)]


def _chunk_logits(hidden, weight, bias, start: int, end: int, temperature: float, onednn: bool) -> torch.Tensor:
    """Logits of vocabulary entries start:end, transposed ([end - start, rows]), float32:
    one contiguous slice of the weight is the product's left operand. ``hidden`` is in
    the compute dtype; the weight slice is cast to it."""
    logits = linear(weight[start:end].to(hidden.dtype), hidden, onednn=onednn).float()
    if bias is not None:
        logits += bias[start:end, None].float()
    if temperature != 1.0:
        logits.div_(temperature)
    return logits


def _in_chunk(targets: torch.Tensor, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(mask of targets inside start:end, their row in the chunk, clamped for the others)."""
    return (targets >= start) & (targets < end), (targets - start).clamp(0, end - start - 1)


class _ChunkedHead(torch.autograd.Function):
    """Chunked ``log_softmax(h W^T + b)[target]``: d logp / d logits = onehot(target) - p."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, onednn, with_entropy, compute_dtype):
        rows = hidden.shape[0]
        ctx.input_dtype = hidden.dtype
        hidden = hidden.to(compute_dtype)
        picked = torch.empty(rows, dtype=torch.float32, device=hidden.device)
        normaliser = torch.empty_like(picked)
        entropy = torch.empty_like(picked) if with_entropy else None
        # Kept chunks: (start, end, exp(z - m), m) per row block, m the running max when computed.
        kept: list[list[tuple[int, int, torch.Tensor, torch.Tensor]]] | None = (
            [] if any(ctx.needs_input_grad[:3]) and rows * weight.shape[0] * 4 <= HEAD_SAVE_BYTES else None
        )
        for r0 in range(0, rows, HEAD_ROW_BLOCK):
            r1 = min(r0 + HEAD_ROW_BLOCK, rows)
            block, block_targets = hidden[r0:r1], targets[r0:r1]
            # Online log-sum-exp: running max m, sum s of exp(z - m) (and of exp(z - m) z for the entropy).
            m = torch.full((r1 - r0,), float("-inf"), device=hidden.device)
            s, weighted, target_logit = torch.zeros_like(m), torch.zeros_like(m), torch.zeros_like(m)
            if kept is not None:
                kept.append([])
            for start, end in _vocab_chunks(r1 - r0, weight.shape[0]):
                logits = _chunk_logits(block, weight, bias, start, end, temperature, onednn)
                inside, local = _in_chunk(block_targets, start, end)
                target_logit = torch.where(inside, logits.gather(0, local[None]).squeeze(0), target_logit)
                new_m = torch.maximum(m, logits.amax(0))
                rescale = (m - new_m).exp()
                if with_entropy:
                    exp = (logits - new_m).exp_()
                    weighted = weighted * rescale + (exp * logits).sum(0)
                else:
                    exp = logits.sub_(new_m).exp_()
                s = s * rescale + exp.sum(0)
                m = new_m
                if kept is not None:
                    kept[-1].append((start, end, exp, new_m))
            lse = m + s.log()
            normaliser[r0:r1] = lse
            picked[r0:r1] = target_logit - lse
            if with_entropy:
                # H = lse - sum_v p_v z_v
                entropy[r0:r1] = lse - weighted / s
        ctx.save_for_backward(hidden, weight, bias, targets, normaliser)
        ctx.temperature, ctx.onednn, ctx.kept, ctx.compute_dtype = temperature, onednn, kept, compute_dtype
        if entropy is not None:
            ctx.mark_non_differentiable(entropy)
        return picked, entropy

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_picked, _grad_entropy):
        hidden, weight, bias, targets, normaliser = ctx.saved_tensors
        need_hidden, need_weight, need_bias = ctx.needs_input_grad[:3]
        grad_hidden = torch.empty_like(hidden, dtype=ctx.input_dtype) if need_hidden else None
        rows = hidden.shape[0]
        # Each row block's pass writes (first block) or adds to every row of the weight's gradient.
        grad_weight = (torch.empty_like(weight) if rows else torch.zeros_like(weight)) if need_weight else None
        grad_bias = torch.zeros_like(bias) if need_bias else None
        for r0 in range(0, rows, HEAD_ROW_BLOCK):
            r1 = min(r0 + HEAD_ROW_BLOCK, rows)
            block, block_targets = hidden[r0:r1], targets[r0:r1]
            grad, lse = grad_picked[r0:r1].float(), normaliser[r0:r1]
            grad_block_t = None
            if ctx.kept is not None:
                chunks = ctx.kept[r0 // HEAD_ROW_BLOCK]
            else:
                chunks = [(start, end, None, None) for start, end in _vocab_chunks(r1 - r0, weight.shape[0])]
            for start, end, kept_exp, kept_max in chunks:
                # d/dz (z_t - lse) = onehot(t) - softmax(z); the 1/T of z = logits / T comes last.
                if kept_exp is not None:
                    # softmax = exp(z - m) exp(m - lse); out of place, so a retained graph can run it again.
                    grad_logits = kept_exp * ((kept_max - lse).exp_() * -grad)
                else:
                    logits = _chunk_logits(block, weight, bias, start, end, ctx.temperature, ctx.onednn)
                    grad_logits = logits.sub_(lse).exp_().mul_(-grad)
                inside, local = _in_chunk(block_targets, start, end)
                grad_logits.scatter_add_(0, local[None], torch.where(inside, grad, 0.0)[None])
                if ctx.temperature != 1.0:
                    grad_logits.div_(ctx.temperature)
                grad_logits = grad_logits.to(ctx.compute_dtype)
                if need_hidden:
                    # [H, rows] += W_chunk^T grad_logits: the chunk's slice is the small operand to
                    # transpose. Summed over chunks in float32 (a bf16 running sum would round).
                    part = linear(
                        weight[start:end].to(ctx.compute_dtype).t(), grad_logits.t(), onednn=ctx.onednn
                    ).float()
                    grad_block_t = part if grad_block_t is None else grad_block_t.add_(part)
                if need_weight:
                    part = linear(grad_logits, block.t(), onednn=ctx.onednn)
                    if r0 == 0:
                        grad_weight[start:end] = part
                    else:
                        grad_weight[start:end] += part
                if need_bias:
                    grad_bias[start:end] += grad_logits.sum(1)
            if need_hidden:
                grad_hidden[r0:r1] = grad_block_t.t()
        return grad_hidden, grad_weight, grad_bias, None, None, None, None, None
