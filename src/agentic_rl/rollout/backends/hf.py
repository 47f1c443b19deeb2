"""The in-process transformers backend. It shares the trainer's model object (no copy),
so a training step's new weights are seen by the next ``generate`` automatically."""

from __future__ import annotations

import torch

from agentic_rl.rollout.backends.base import Completion, SamplingParams


class HFBackend:
    kind = "tokens"

    min_shared_prefix = 32
    """Shared prompt prefixes at least this long are encoded once per batch."""

    def __init__(self, model, tokenizer, *, batch_size: int = 64) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def generate(self, prompts: list[list[int]], sampling: SamplingParams, *, stop_token_ids: list[int], max_new_tokens: list[int] | None = None) -> list[Completion]:
        limits = max_new_tokens or [sampling.max_new_tokens] * len(prompts)
        # Sort by length so each micro-batch pads little; results go back in input order.
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        results: list[Completion | None] = [None] * len(prompts)
        for number, start in enumerate(range(0, len(order), self.batch_size)):
            chunk = order[start : start + self.batch_size]
            generator = torch.Generator(device=self.device)
            if sampling.seed is not None:
                # A distinct, reproducible stream per micro-batch: the same seed gives the same samples.
                generator.manual_seed(sampling.seed * 1_000_003 + number)
            else:
                generator.seed()
            outputs = self._generate_batch([prompts[i] for i in chunk], sampling, stop_token_ids, [limits[i] for i in chunk], generator)
            for i, completion in zip(chunk, outputs):
                results[i] = completion
        return results  # type: ignore[return-value]

    def _prefix_cache(self, prefix: list[int], batch: int):
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        ids = torch.tensor([prefix], dtype=torch.long, device=self.device)
        self.model(input_ids=ids, attention_mask=torch.ones_like(ids), past_key_values=cache, use_cache=True, logits_to_keep=1)
        cache.batch_repeat_interleave(batch)
        return cache

    @torch.no_grad()
    def _generate_batch(self, prompts, sampling: SamplingParams, stop_token_ids, limits, generator) -> list[Completion]:
        """Decode a batch with a KV cache; rows leave the batch as soon as they finish, so
        the cost of each step follows the rows still running, not the longest one."""
        model, device = self.model, self.device
        prefix = _common_prefix(prompts) if len(prompts) > 1 else []
        # Encode the shared prefix (system prompt, demonstrations) once and let every row
        # start from its KV cache: prompts in a batch usually share most of their tokens.
        cache = self._prefix_cache(prefix, len(prompts)) if len(prefix) >= self.min_shared_prefix else None
        if cache is None:
            from transformers import DynamicCache

            prefix, cache = [], DynamicCache(config=model.config)
        suffixes = [p[len(prefix) :] for p in prompts]
        width = max(len(s) for s in suffixes)
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), len(prefix) + width), dtype=torch.long)
        attention_mask[:, : len(prefix)] = 1
        for row, suffix in enumerate(suffixes):  # left-pad the suffixes; pads are masked out
            input_ids[row, width - len(suffix) :] = torch.tensor(suffix)
            attention_mask[row, len(prefix) + width - len(suffix) :] = 1
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        was_training = model.training
        model.eval()
        try:
            out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions[:, len(prefix) :], past_key_values=cache, use_cache=True, logits_to_keep=1)
            next_position = positions[:, -1] + 1
            rows = list(range(len(prompts)))  # original row of each active batch entry
            tokens: list[list[int]] = [[] for _ in prompts]
            logprobs: list[list[float]] = [[] for _ in prompts]
            entropies: list[list[float]] | None = [[] for _ in prompts] if sampling.return_entropy else None
            finish = ["length"] * len(prompts)
            stops = torch.tensor(sorted(set(stop_token_ids)), device=device)
            limit = torch.tensor(limits, device=device)
            for step in range(max(limits)):
                step_logits = out.logits[:, -1, :].float()
                chosen, chosen_logprobs = _sample(step_logits, sampling, generator)
                for entry, row in enumerate(rows):
                    tokens[row].append(int(chosen[entry]))
                    logprobs[row].append(float(chosen_logprobs[entry]))
                if entropies is not None:
                    step_entropy = _entropy(step_logits, sampling.temperature).tolist()
                    for entry, row in enumerate(rows):
                        entropies[row].append(step_entropy[entry])
                stopped = torch.isin(chosen, stops)
                done = stopped | (limit[rows] <= step + 1)
                for entry in done.nonzero().flatten().tolist():
                    if stopped[entry]:
                        finish[rows[entry]] = "stop"
                if bool(done.all()):
                    break
                if bool(done.any()):
                    keep = (~done).nonzero().flatten()
                    cache.batch_select_indices(keep)
                    rows = [rows[i] for i in keep.tolist()]
                    chosen, attention_mask, next_position = chosen[keep], attention_mask[keep], next_position[keep]
                attention_mask = torch.cat([attention_mask, attention_mask.new_ones((len(rows), 1))], dim=1)
                out = model(input_ids=chosen[:, None], attention_mask=attention_mask, position_ids=next_position[:, None], past_key_values=cache, use_cache=True)
                next_position = next_position + 1
        finally:
            model.train(was_training)
        return [Completion(token_ids=tokens[i], logprobs=logprobs[i], finish_reason=finish[i], entropies=entropies[i] if entropies is not None else None) for i in range(len(prompts))]

def _common_prefix(prompts: list[list[int]]) -> list[int]:
    """The longest common prefix, minus one token so every row keeps a token to feed."""
    shortest = min(prompts, key=len)
    end = 0
    while end < len(shortest) - 1 and all(p[end] == shortest[end] for p in prompts):
        end += 1
    return shortest[:end]



def _entropy(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """[N] entropy (nats) of softmax(logits / T); greedy decoding reports the T=1 entropy."""
    log_probs = torch.log_softmax(logits / (temperature if temperature > 0 else 1.0), -1)
    return -(log_probs.exp() * log_probs).sum(-1)


def _sample(logits: torch.Tensor, sampling: SamplingParams, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Next tokens [N] and their log-probs [N] under the policy at this temperature.

    The log-prob is taken before top-p truncation: it is what the policy assigns, and
    what the trainer's forward pass reproduces (top-p only narrows what is drawn).
    """
    if sampling.temperature <= 0:
        chosen = logits.argmax(-1)
        return chosen, torch.log_softmax(logits, -1).gather(-1, chosen[:, None]).squeeze(-1)
    log_probs = torch.log_softmax(logits / sampling.temperature, -1)
    probs = log_probs.exp()
    if sampling.top_p < 1.0:
        sorted_probs, order = probs.sort(-1, descending=True)
        # Drop a token once the mass before it already reaches top_p (the first always stays).
        drop = sorted_probs.cumsum(-1) - sorted_probs >= sampling.top_p
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs.masked_fill(drop, 0.0))
    chosen = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return chosen, log_probs.gather(-1, chosen[:, None]).squeeze(-1)
