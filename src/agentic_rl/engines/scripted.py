"""A fake backend that replays given replies, for testing engine logic without a model."""

from __future__ import annotations

from collections.abc import Callable

from agentic_rl.engines.base import Completion, SamplingParams, SharedWeights

Script = list[str] | Callable[[list[int], int], str]


class ScriptedBackend(SharedWeights):
    """Replies come from a list (the n-th ``generate`` call gives every prompt reply n;
    the last reply repeats) or a function ``(prompt_token_ids, call_index) -> reply``. Replies are tokenized with the
    real tokenizer and end with a stop token, like a real model's turn; log-probs are 0.

    ``delay_s`` sleeps per call (to test wall timeouts).
    """

    interface = "tokens"

    def __init__(self, tokenizer, script: Script, *, delay_s: float = 0.0) -> None:
        self.tokenizer = tokenizer
        self.script = script
        self.delay_s = delay_s
        self.calls = 0
        self.prompts: list[list[int]] = []

    def _reply(self, prompt: list[int]) -> str:
        if callable(self.script):
            return self.script(prompt, self.calls)
        return self.script[min(self.calls, len(self.script) - 1)]

    def generate(self, prompts, sampling: SamplingParams, *, stop_token_ids, max_new_tokens=None) -> list[Completion]:
        import time

        if self.delay_s:
            time.sleep(self.delay_s)
        completions = []
        for i, prompt in enumerate(prompts):
            self.prompts.append(list(prompt))
            limit = (max_new_tokens[i] if max_new_tokens else None) or sampling.max_new_tokens
            ids = self.tokenizer(self._reply(prompt), add_special_tokens=False)["input_ids"] + [stop_token_ids[0]]
            finish = "stop"
            if len(ids) > limit:
                ids, finish = ids[:limit], "length"
            completions.append(
                Completion(
                    token_ids=ids, logprobs=[0.0] * len(ids), finish_reason=finish, weight_version=self.weight_version
                )
            )
        self.calls += 1
        return completions
