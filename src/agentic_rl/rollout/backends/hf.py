"""The in-process transformers backend. It shares the trainer's model object (no copy),
so a training step's new weights are seen by the next ``generate`` automatically."""

from __future__ import annotations

import torch

from agentic_rl.rollout.backends.base import Completion, SamplingParams


class HFBackend:
    kind = "tokens"

    min_shared_prefix = 32
    """Shared prompt prefixes at least this long are encoded once per batch."""

    def __init__(self, model, tokenizer, *, batch_size: int = 32) -> None:
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
            if sampling.seed is not None:
                # A distinct, reproducible stream per micro-batch: the same seed gives the same samples.
                torch.manual_seed(sampling.seed * 1_000_003 + number)
            outputs = self._generate_batch([prompts[i] for i in chunk], sampling, stop_token_ids, [limits[i] for i in chunk])
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
    def _generate_batch(self, prompts, sampling: SamplingParams, stop_token_ids, limits) -> list[Completion]:
        prefix = _common_prefix(prompts) if len(prompts) > 1 else []
        # Encode the shared prefix (system prompt, demonstrations) once and let every row
        # start from its KV cache: prompts in a batch usually share most of their tokens.
        past = self._prefix_cache(prefix, len(prompts)) if len(prefix) >= self.min_shared_prefix else None
        if past is None:
            prefix = []
        suffixes = [p[len(prefix) :] for p in prompts]
        width = max(len(s) for s in suffixes)
        input_ids = torch.full((len(prompts), len(prefix) + width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        input_ids[:, : len(prefix)] = torch.tensor(prefix, dtype=torch.long)
        attention_mask[:, : len(prefix)] = 1
        for row, suffix in enumerate(suffixes):  # pads sit between prefix and suffix, masked out
            input_ids[row, input_ids.shape[1] - len(suffix) :] = torch.tensor(suffix)
            attention_mask[row, input_ids.shape[1] - len(suffix) :] = 1
        width = input_ids.shape[1]
        greedy = sampling.temperature <= 0
        was_training = self.model.training
        self.model.eval()
        try:
            out = self.model.generate(
                input_ids=input_ids.to(self.device),
                attention_mask=attention_mask.to(self.device),
                max_new_tokens=max(limits),
                do_sample=not greedy,
                temperature=None if greedy else sampling.temperature,
                top_p=None if greedy else sampling.top_p,
                top_k=None,
                eos_token_id=stop_token_ids,
                pad_token_id=self.pad_token_id,
                past_key_values=past,
                output_logits=True,
                return_dict_in_generate=True,
            )
        finally:
            self.model.train(was_training)
        new_tokens = out.sequences[:, width:].cpu()
        # Raw logits (before top-p), so the logprobs are those the policy assigns; the
        # trainer's forward pass reproduces them exactly at the same temperature.
        logits = torch.stack(out.logits, dim=1).float()
        if not greedy:
            logits = logits / sampling.temperature
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, new_tokens.to(logits.device).unsqueeze(-1)).squeeze(-1).cpu()
        stops = set(stop_token_ids)
        completions = []
        for row in range(len(prompts)):
            ids = new_tokens[row].tolist()[: limits[row]]
            finish = "length"
            for j, token in enumerate(ids):
                if token in stops:
                    ids, finish = ids[: j + 1], "stop"
                    break
            completions.append(Completion(token_ids=ids, logprobs=logprobs[row, : len(ids)].tolist(), finish_reason=finish))
        return completions


def _common_prefix(prompts: list[list[int]]) -> list[int]:
    """The longest common prefix, minus one token so every row keeps a token to feed."""
    shortest = min(prompts, key=len)
    end = 0
    while end < len(shortest) - 1 and all(p[end] == shortest[end] for p in prompts):
        end += 1
    return shortest[:end]
