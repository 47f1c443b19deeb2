"""Log-probabilities of the tokens in a batch, computed only where the loss needs them.

The backbone runs over every position, but the vocabulary projection and log-softmax
(the largest tensors for small models: T x 49k) run only at the selected positions.
"""

from __future__ import annotations

import torch


def _split_model(model):
    """(backbone, lm_head) of a causal LM, also through a peft wrapper."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    backbone = base.get_decoder() if hasattr(base, "get_decoder") else base.model
    return backbone, base.get_output_embeddings()


def token_logprobs(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    select: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of token t given tokens < t, for every t where ``select[b, t]`` is set.

    Shapes: ``input_ids``, ``attention_mask``, ``select``: [B, T]. Returns ``logprobs``
    [B, T] (zero where not selected) and, if asked, the entropy of the predictive
    distribution at those positions [B, T]. Position 0 is never selected (it has no
    context). ``temperature`` divides the logits, as the sampler did.
    """
    backbone, lm_head = _split_model(model)
    # Token t is predicted from the hidden state at t - 1.
    target = select.bool().clone()
    target[:, 0] = False
    rows, cols = target.nonzero(as_tuple=True)
    hidden, offset = _hidden_states(backbone, input_ids, attention_mask, target)
    picked, values = head_logprobs(lm_head, hidden[rows, cols - 1 - offset], input_ids[rows, cols], temperature=temperature, with_entropy=with_entropy)
    out = torch.zeros(input_ids.shape, dtype=picked.dtype, device=picked.device)
    out = out.index_put((rows, cols), picked)
    entropy = None
    if with_entropy:
        entropy = torch.zeros(input_ids.shape, dtype=values.dtype, device=values.device).index_put((rows, cols), values.detach())
    return out, entropy


HEAD_CHUNK_ELEMENTS = 1 << 22
"""Logits held at once by the chunked vocabulary head (vocab columns x rows; 16 MB in float32)."""

HEAD_SAVE_BYTES = 256 << 20
"""The forward keeps each chunk's exponentiated logits for the backward when all of them
fit in this many bytes, which spares the backward one of the head's four products (the
recomputation of the logits); larger batches recompute."""

HEAD_ROW_BLOCK = 8192
"""Rows the chunked head takes at once: more rows would narrow its vocabulary chunks
below the width at which the products run efficiently."""


def head_logprobs(lm_head, hidden: torch.Tensor, targets: torch.Tensor, *, temperature: float = 1.0, with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(targets[i] | hidden[i]) under softmax(lm_head(hidden) / temperature), and the
    predictive entropy (no gradient) if asked. Shapes: hidden [N, H], targets [N] -> [N].

    A linear head runs in vocabulary chunks and never holds the [N, vocab] logits (for a
    49k vocabulary they are the largest tensors of a step, and allocating them costs more
    than the matmul); the log-normaliser accumulates online over the chunks and the
    backward recomputes each chunk's logits. Chunking the vocabulary (not the rows) reads
    each weight row once per pass and writes each row of the weight gradient once. Other
    heads (e.g. peft wrappers) and heads with hooks (the shared critic captures the head's
    input) take the plain module call; both paths give the same values and gradients."""
    from agentic_rl.models.kernels import OneDNNLinear

    hooked = bool(lm_head._forward_pre_hooks or lm_head._forward_hooks)
    if type(lm_head) in (torch.nn.Linear, OneDNNLinear) and not hooked:
        return _ChunkedHead.apply(hidden, lm_head.weight, lm_head.bias, targets, float(temperature), type(lm_head) is OneDNNLinear, with_entropy)
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
    one contiguous slice of the weight is the product's left operand."""
    from agentic_rl.models.kernels import linear

    logits = linear(weight[start:end], hidden, onednn=onednn).float()
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
    def forward(ctx, hidden, weight, bias, targets, temperature, onednn, with_entropy):
        rows = hidden.shape[0]
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
        ctx.temperature, ctx.onednn, ctx.kept = temperature, onednn, kept
        if entropy is not None:
            ctx.mark_non_differentiable(entropy)
        return picked, entropy

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_picked, _grad_entropy):
        from agentic_rl.models.kernels import linear

        hidden, weight, bias, targets, normaliser = ctx.saved_tensors
        need_hidden, need_weight, need_bias = ctx.needs_input_grad[:3]
        grad_hidden = torch.empty_like(hidden) if need_hidden else None
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
                grad_logits = grad_logits.to(weight.dtype)
                if need_hidden:
                    # [H, rows] += W_chunk^T grad_logits: the chunk's slice is the small operand to transpose.
                    part = linear(weight[start:end].t(), grad_logits.t(), onednn=ctx.onednn)
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
        return grad_hidden, grad_weight, grad_bias, None, None, None, None


MIN_SHARED_PREFIX = 32
"""Shared prompt prefixes at least this long are encoded once per micro-batch."""


def _shared_prefix_length(input_ids: torch.Tensor, attention_mask: torch.Tensor, target: torch.Tensor) -> int:
    """Length of the token prefix all rows share, ending before any position whose
    hidden state a selected token needs."""
    if input_ids.shape[0] < 2:
        return 0
    same = (input_ids == input_ids[:1]).all(0) & attention_mask.bool().all(0)
    length = int(same.long().cumprod(0).sum())
    if target.any():
        first_needed = int(target.float().argmax(1)[target.any(1)].min()) - 1
        length = min(length, first_needed)
    return length if length >= MIN_SHARED_PREFIX else 0


def _hidden_states(backbone, input_ids: torch.Tensor, attention_mask: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Last hidden states and the column they start at.

    Rows of a batch usually share a long prompt prefix (system prompt, tool list). It is
    encoded once and its KV cache, expanded to every row, feeds the rest: gradients flow
    back through the shared cache, so the result and its gradient equal a full forward
    pass, at a fraction of the cost.
    """
    # Under activation checkpointing transformers drops the KV cache inside each layer, so
    # the prefix would silently vanish from the suffix's context: run the full pass then.
    checkpointing = getattr(backbone, "gradient_checkpointing", False) and backbone.training
    prefix = 0 if checkpointing else _shared_prefix_length(input_ids, attention_mask, target)
    if not prefix:
        return backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state, 0
    from transformers import DynamicCache

    cache = DynamicCache(config=backbone.config)
    backbone(input_ids=input_ids[:1, :prefix], past_key_values=cache, use_cache=True)
    cache.batch_repeat_interleave(input_ids.shape[0])
    width = input_ids.shape[1]
    positions = torch.arange(prefix, width, device=input_ids.device).expand(input_ids.shape[0], -1)
    hidden = backbone(
        input_ids=input_ids[:, prefix:], attention_mask=attention_mask, position_ids=positions, past_key_values=cache, use_cache=True
    ).last_hidden_state
    return hidden, prefix
