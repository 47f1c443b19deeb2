"""Rendering messages to tokens with the model's own chat template, token-in-token-out.

The prompt is tokenized once. After that, sampled tokens are kept exactly as sampled and
each observation is rendered once, as the text the chat template would put between the
end of the assistant's content and the start of the next assistant turn. History is
never re-tokenized, so the trained-on tokens are exactly the sampled ones.
"""

from __future__ import annotations

from agentic_rl.types import Message

_PROBE = "\u2063PROBE\u2063"  # text that never occurs in a template, to locate content


class ChatRenderer:
    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("tokenizer has no chat template; multi-turn rollouts need one")
        self.stop_token_ids = self._stop_token_ids()
        # What the template writes after an assistant message's content (e.g. "<|im_end|>\n").
        probe = [{"role": "user", "content": "u"}, {"role": "assistant", "content": _PROBE}]
        rendered = self._render(probe, add_generation_prompt=False)
        self.assistant_suffix = rendered[rendered.rindex(_PROBE) + len(_PROBE) :]

    def _stop_token_ids(self) -> list[int]:
        ids = {self.tokenizer.eos_token_id}
        for token in ("<|im_end|>", "<|eot_id|>", "<|end|>"):
            token_id = self.tokenizer.convert_tokens_to_ids(token)
            if isinstance(token_id, int) and token_id != self.tokenizer.unk_token_id:
                ids.add(token_id)
        return sorted(i for i in ids if i is not None)

    def _render(self, messages: list[Message], *, add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)

    def encode_text(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def prompt_ids(self, messages: list[Message]) -> list[int]:
        """Tokens of the opening conversation plus the assistant generation prompt."""
        return self.encode_text(self._render(messages, add_generation_prompt=True))

    def response_text(self, token_ids: list[int]) -> str:
        """The assistant content of sampled tokens (a trailing stop token is not content)."""
        if token_ids and token_ids[-1] in self.stop_token_ids:
            token_ids = token_ids[:-1]
        return self.tokenizer.decode(token_ids, skip_special_tokens=False)

    def observation_text(self, observations: list[Message], *, stopped: bool) -> str:
        """Text to append after an assistant turn: the end of that turn the model did not
        sample itself, the observation messages, and the next generation prompt.

        ``stopped``: whether the turn ended with a sampled stop token (else it was cut at
        the token limit and the whole end-of-turn suffix is added).
        """
        probe = [{"role": "user", "content": "u"}, {"role": "assistant", "content": _PROBE}]
        before = self._render(probe, add_generation_prompt=False)
        after = self._render(probe + observations, add_generation_prompt=True)
        if not after.startswith(before):
            raise ValueError("chat template renders earlier messages differently once more follow; cannot append observations")
        remainder = self.assistant_suffix
        if stopped:
            stop_texts = [self.tokenizer.decode([i]) for i in self.stop_token_ids]
            matched = next((s for s in stop_texts if remainder.startswith(s)), None)
            remainder = remainder[len(matched) :] if matched else remainder
        return remainder + after[len(before) :]

    def observation_ids(self, observations: list[Message], *, stopped: bool) -> list[int]:
        return self.encode_text(self.observation_text(observations, stopped=stopped))
